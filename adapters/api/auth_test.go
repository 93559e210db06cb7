package api_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// b64 is base64url without padding, as in a compact JWS.
func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// rawHS256 signs header and payload exactly as written (so a test can put
// a duplicate member or an odd name into the JSON) with key.
func rawHS256(key []byte, header, payload string) string {
	in := b64(header) + "." + b64(payload)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

const hsHeader = `{"alg":"HS256","typ":"JWT"}`

// payload returns claims JSON valid for an hour from now, with extra
// members (already JSON, e.g. `"scope":"admin"`) appended.
func payload(sub string, extra ...string) string {
	now := time.Now().Unix()
	p := `{"sub":` + sub + `,"iat":` + jsonInt(now) + `,"exp":` + jsonInt(now+3600)
	for _, e := range extra {
		p += "," + e
	}
	return p + "}"
}

func jsonInt(n int64) string { return strconv.FormatInt(n, 10) }

func hsAuth(t *testing.T) *api.Authenticator {
	t.Helper()
	a, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// refused fails the test unless err is set and mentions want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want refused (%s)", what, want)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: refused with %q, want it to say %q", what, err, want)
	}
}

// TestAuthSubjectMustBeCanonical: every spelling of a user id but the
// canonical decimal one is refused, so "+1001" and "01001" cannot act
// as buyer 1001.
func TestAuthSubjectMustBeCanonical(t *testing.T) {
	a := hsAuth(t)
	for _, sub := range []string{`"+1001"`, `"01001"`, `" 1001"`, `"1001 "`, `"1e3"`, `"1001.0"`, `"9223372036854775808"`,
		`"0"`, `"-1"`, `""`, `"１００１"`, `"0x3e9"`, `"1_001"`, `1001`} {
		_, err := a.Verify(rawHS256(secret, hsHeader, payload(sub)))
		refused(t, "sub "+sub, err, "sub must be")
	}
	for sub, want := range map[string]int64{`"1001"`: 1001, `"9223372036854775807"`: 9223372036854775807, `"1"`: 1} {
		id, err := a.Verify(rawHS256(secret, hsHeader, payload(sub)))
		if err != nil || id.UserID != want {
			t.Errorf("sub %s: %+v, %v; want user %d", sub, id, err, want)
		}
	}
}

// TestAuthStrictClaims: duplicate members anywhere are refused, claim
// names are case-sensitive ("SCOPE" grants nothing), scopes split on
// ASCII space only, crit is refused, exp is required, claims must have
// their JSON types.
func TestAuthStrictClaims(t *testing.T) {
	a := hsAuth(t)
	for what, tok := range map[string]string{
		"scope twice":        rawHS256(secret, hsHeader, payload(`"1001"`, `"scope":"payment"`, `"scope":"admin"`)),
		"sub twice":          rawHS256(secret, hsHeader, payload(`"1001"`, `"sub":"1002"`)),
		"exp twice":          rawHS256(secret, hsHeader, payload(`"1001"`, `"exp":9999999999`)),
		"nested duplicate":   rawHS256(secret, hsHeader, payload(`"1001"`, `"ext":{"a":1,"a":2}`)),
		"duplicate in array": rawHS256(secret, hsHeader, payload(`"1001"`, `"ext":[{"a":1,"a":2}]`)),
		"header alg twice":   rawHS256(secret, `{"alg":"HS256","alg":"none"}`, payload(`"1001"`)),
		"header kid twice":   rawHS256(secret, `{"alg":"HS256","kid":"a","kid":"b"}`, payload(`"1001"`)),
		"escaped duplicate":  rawHS256(secret, hsHeader, payload(`"1001"`, `"sc\u006fpe":"admin"`, `"scope":"x"`)),
	} {
		_, err := a.Verify(tok)
		refused(t, what, err, "duplicate JSON member")
	}
	for what, c := range map[string]struct{ tok, want string }{
		"crit":            {rawHS256(secret, `{"alg":"HS256","crit":["exp"],"exp":1}`, payload(`"1001"`)), "crit"},
		"empty crit":      {rawHS256(secret, `{"alg":"HS256","crit":[]}`, payload(`"1001"`)), "crit"},
		"no exp":          {rawHS256(secret, hsHeader, `{"sub":"1001"}`), "exp is required"},
		"exp a string":    {rawHS256(secret, hsHeader, `{"sub":"1001","exp":"9999999999"}`), "exp must be a number"},
		"exp null":        {rawHS256(secret, hsHeader, `{"sub":"1001","exp":null}`), "exp must be a number"},
		"no sub":          {rawHS256(secret, hsHeader, `{"exp":`+jsonInt(time.Now().Unix()+60)+`}`), "sub is required"},
		"scope an array":  {rawHS256(secret, hsHeader, payload(`"1001"`, `"scope":["admin"]`)), "scope must be a string"},
		"aud a number":    {rawHS256(secret, hsHeader, payload(`"1001"`, `"aud":7`)), "aud must be"},
		"trailing data":   {rawHS256(secret, hsHeader, payload(`"1001"`)+`{}`), "JSON"},
		"payload array":   {rawHS256(secret, hsHeader, `["sub"]`), "JSON"},
		"invalid UTF-8":   {rawHS256(secret, hsHeader, payload(`"1001"`, "\"x\":\"\xff\"")), "UTF-8"},
		"two parts":       {b64(hsHeader) + "." + b64(payload(`"1001"`)), "compact JWS"},
		"padded base64":   {b64(hsHeader) + "=." + b64(payload(`"1001"`)) + ".x", "base64url"},
		"wrong signature": {rawHS256([]byte("another-secret-0123456789"), hsHeader, payload(`"1001"`)), "signature"},
	} {
		_, err := a.Verify(c.tok)
		refused(t, what, err, c.want)
	}

	for what, c := range map[string]struct {
		extra          string
		admin, payment bool
	}{
		`"SCOPE":"admin"`:           {`"SCOPE":"admin"`, false, false},
		`"Scope":"admin payment"`:   {`"Scope":"admin payment"`, false, false},
		"no-break space":            {`"scope":"admin\u00a0payment"`, false, false},
		"tab":                       {`"scope":"admin\tpayment"`, false, false},
		"newline":                   {`"scope":"admin\npayment"`, false, false},
		"ideographic space":         {`"scope":"payment\u3000admin"`, false, false},
		"spaces, doubled and ends":  {`"scope":"  payment   admin "`, true, true},
		"payment alone":             {`"scope":"payment"`, false, true},
		"admin prefix is not admin": {`"scope":"administrator"`, false, false},
	} {
		id, err := a.Verify(rawHS256(secret, hsHeader, payload(`"1001"`, c.extra)))
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if id.Admin != c.admin || id.Payment != c.payment {
			t.Errorf("%s: admin %v payment %v, want %v %v", what, id.Admin, id.Payment, c.admin, c.payment)
		}
	}
}

// TestAuthAlgorithmsWithoutJWKS: the shared-secret mode takes HS256
// only: none, HS384 and RS256 headers are refused before any key is
// looked at.
func TestAuthAlgorithmsWithoutJWKS(t *testing.T) {
	a := hsAuth(t)
	p := payload(`"1001"`)
	none := b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(p) + "."
	refused(t, "alg none", second(a.Verify(none)), `alg "none" is not accepted`)
	noneSigned := b64(`{"alg":"none"}`) + "." + b64(p) + "." + strings.Split(rawHS256(secret, hsHeader, p), ".")[2]
	refused(t, "alg none with a signature", second(a.Verify(noneSigned)), `alg "none"`)
	refused(t, "alg NONE", second(a.Verify(b64(`{"alg":"NONE"}`)+"."+b64(p)+".")), "is not accepted")
	hs384, err := jwt.NewWithClaims(jwt.SigningMethodHS384, jwt.MapClaims{"sub": "1001", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "HS384", second(a.Verify(hs384)), `alg "HS384"`)
	refused(t, "no alg", second(a.Verify(rawHS256(secret, `{"typ":"JWT"}`, p))), "alg is required")
	if _, err := a.Verify(rawHS256(secret, hsHeader, p)); err != nil {
		t.Fatalf("valid HS256 token: %v", err)
	}
}

// second returns the error of a (value, error) pair.
func second[T any](_ T, err error) error { return err }

// TestAuthLifetimeAndTimes: exp must be in the future and at most the
// maximum lifetime from iat and from now; iat and nbf may not lie beyond
// the leeway in the future.
func TestAuthLifetimeAndTimes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a, err := api.NewAuthenticatorWith(context.Background(), api.AuthOptions{Secret: secret, MaxLifetime: time.Hour,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string { return jsonInt(now.Add(d).Unix()) }
	for what, c := range map[string]struct{ claims, want string }{
		"expired":             {`{"sub":"1","exp":` + at(-time.Second) + `}`, "expired"},
		"exp now":             {`{"sub":"1","exp":` + at(0) + `}`, "expired"},
		"exp beyond max":      {`{"sub":"1","exp":` + at(time.Hour+time.Minute) + `}`, "from now"},
		"exp-iat beyond max":  {`{"sub":"1","iat":` + at(-2*time.Hour) + `,"exp":` + at(30*time.Minute) + `}`, "after iat"},
		"iat in the future":   {`{"sub":"1","iat":` + at(2*time.Minute) + `,"exp":` + at(30*time.Minute) + `}`, "iat lies in the future"},
		"nbf in the future":   {`{"sub":"1","nbf":` + at(2*time.Minute) + `,"exp":` + at(30*time.Minute) + `}`, "nbf"},
		"exp beyond any date": {`{"sub":"1","exp":1e300}`, "exp must be"},
		"negative iat":        {`{"sub":"1","iat":-5,"exp":` + at(time.Minute) + `}`, "iat must be"},
	} {
		refused(t, what, second(a.Verify(rawHS256(secret, hsHeader, c.claims))), c.want)
	}
	for what, claims := range map[string]string{
		"exactly max":       `{"sub":"1","iat":` + at(0) + `,"exp":` + at(time.Hour) + `}`,
		"iat within leeway": `{"sub":"1","iat":` + at(20*time.Second) + `,"exp":` + at(time.Hour) + `}`,
		"fractional exp":    `{"sub":"1","exp":` + at(time.Minute) + `.5}`,
		"no iat":            `{"sub":"1","exp":` + at(time.Minute) + `}`,
		"nbf past":          `{"sub":"1","nbf":` + at(-time.Minute) + `,"exp":` + at(time.Minute) + `}`,
	} {
		if _, err := a.Verify(rawHS256(secret, hsHeader, claims)); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	// The default maximum is 24 hours.
	d := hsAuth(t)
	long, err := api.MintToken(secret, 1, false, 25*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "25h token with the default maximum", second(d.Verify(long)), "24h0m0s")
	day, err := api.MintToken(secret, 1, false, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Verify(day); err != nil {
		t.Fatalf("24h token: %v", err)
	}
}

// TestAuthIssuerAndAudience: with an issuer configured iss must equal it;
// with an audience configured aud (a string or an array) must contain it.
func TestAuthIssuerAndAudience(t *testing.T) {
	a, err := api.NewAuthenticatorWith(context.Background(), api.AuthOptions{Secret: secret,
		Issuer: "https://idp.example", Audience: "seckill"})
	if err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]struct{ extra, want string }{
		"no iss":          {`"aud":"seckill"`, "iss"},
		"other iss":       {`"iss":"https://evil.example","aud":"seckill"`, "iss"},
		"iss case":        {`"iss":"https://IDP.example","aud":"seckill"`, "iss"},
		"no aud":          {`"iss":"https://idp.example"`, "aud"},
		"other aud":       {`"iss":"https://idp.example","aud":"shop"`, "aud"},
		"aud array other": {`"iss":"https://idp.example","aud":["shop","seckill2"]`, "aud"},
		"ISS uppercase":   {`"ISS":"https://idp.example","aud":"seckill"`, "iss"},
	} {
		refused(t, what, second(a.Verify(rawHS256(secret, hsHeader, payload(`"7"`, c.extra)))), c.want)
	}
	for _, extra := range []string{`"iss":"https://idp.example","aud":"seckill"`, `"iss":"https://idp.example","aud":["shop","seckill"]`} {
		if _, err := a.Verify(rawHS256(secret, hsHeader, payload(`"7"`, extra))); err != nil {
			t.Errorf("%s: %v", extra, err)
		}
	}
	// Without them configured, neither is required.
	if _, err := hsAuth(t).Verify(rawHS256(secret, hsHeader, payload(`"7"`, `"iss":"anyone"`))); err != nil {
		t.Fatal(err)
	}
}

// TestAuthPaymentPrincipalOnlyPays: a token with the payment scope (and
// not admin) may call PayOrder and nothing else; admin with payment may
// call everything; a buyer may not pay.
func TestAuthPaymentPrincipalOnlyPays(t *testing.T) {
	e := start(t)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	admin := seckillv1connect.NewAdminServiceClient(e.client, e.base, connect.WithGRPC())
	ctx := context.Background()
	scoped := func(scopes ...string) string {
		tok, err := api.MintScopedToken(secret, 900_000_001, scopes, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	calls := map[string]func(tok string) error{
		"PlaceOrder": func(tok string) error {
			_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 2, RequestId: "r1"}, tok))
			return err
		},
		"GetOrder": func(tok string) error {
			_, err := orders.GetOrder(ctx, withToken(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
			return err
		},
		"CancelOrder": func(tok string) error {
			_, err := orders.CancelOrder(ctx, withToken(&seckillv1.CancelOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
			return err
		},
		"Admin.GetStockReport": func(tok string) error {
			_, err := admin.GetStockReport(ctx, withToken(&seckillv1.GetStockReportRequest{ActivityId: 1, SkuId: 2}, tok))
			return err
		},
		"Admin.ListDeadLetters": func(tok string) error {
			_, err := admin.ListDeadLetters(ctx, withToken(&seckillv1.ListDeadLettersRequest{}, tok))
			return err
		},
	}
	pay := func(tok string) error {
		_, err := orders.PayOrder(ctx, withToken(&seckillv1.PayOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5", PaymentId: "pay_1"}, tok))
		return err
	}
	payer := scoped(api.ScopePayment)
	for name, call := range calls {
		err := call(payer)
		ce := connectErr(t, err, connect.CodePermissionDenied)
		if !strings.Contains(ce.Message(), "payment token may call only PayOrder") {
			t.Errorf("%s with a payment token: %q", name, ce.Message())
		}
	}
	if err := pay(payer); err != nil {
		t.Fatalf("PayOrder with a payment token: %v", err)
	}
	both := scoped(api.ScopePayment, api.ScopeAdmin)
	for name, call := range calls {
		if name == "Admin.ListDeadLetters" {
			continue // needs a valid request shape of its own; GetStockReport covers the admin service
		}
		if err := call(both); err != nil && connect.CodeOf(err) == connect.CodePermissionDenied {
			t.Errorf("%s with admin+payment: %v", name, err)
		}
	}
	wantCode(t, pay(scoped()), connect.CodePermissionDenied)
}

// BenchmarkAuthVerifyFull measures the verification of tokens the
// verified-token cache has not seen (a buyer's first call): the strict
// header and claims parse and the HS256 signature.
func BenchmarkAuthVerifyFull(b *testing.B) {
	secret := []byte("bench-secret-0123456789")
	a, err := api.NewAuthenticatorWith(context.Background(), api.AuthOptions{Secret: secret, VerifiedTokens: -1})
	if err != nil {
		b.Fatal(err)
	}
	tokens := make([]string, 1024)
	for i := range tokens {
		tokens[i] = rawHS256(secret, hsHeader, payload(`"`+strconv.Itoa(1000+i)+`"`, `"scope":"buyer"`))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := a.Verify(tokens[i%len(tokens)]); err != nil {
			b.Fatal(err)
		}
	}
}
