package bootstrap_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// rawToken signs header and payload exactly as written with HS256 and
// key, so a test can send what a library would not produce.
func rawToken(key []byte, header, payload string) string {
	enc := base64.RawURLEncoding
	in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(in))
	return in + "." + enc.EncodeToString(m.Sum(nil))
}

// claimsJSON is a payload for sub valid for an hour, with extra members.
func claimsJSON(sub string, extra ...string) string {
	now := time.Now().Unix()
	p := `{"sub":` + sub + `,"iat":` + strconv.FormatInt(now, 10) + `,"exp":` + strconv.FormatInt(now+3600, 10)
	for _, e := range extra {
		p += "," + e
	}
	return p + "}"
}

func wantConnectCode(t *testing.T, what string, err error, code connect.Code, msg string) {
	t.Helper()
	if connect.CodeOf(err) != code || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s: %v, want %v saying %q", what, err, code, msg)
	}
}

// TestAuthEndToEndOnTheRealService: on the running service a sub alias of
// user 1001 ("+1001", "01001") is Unauthenticated and places nothing, so
// the real 1001 then places an order; "SCOPE":"admin" grants nothing on
// the AdminService; a payment token cannot place an order.
func TestAuthEndToEndOnTheRealService(t *testing.T) {
	s := startSystem(t, options{})
	const act = 9101
	s.activity(act, 10, time.Minute, 30*time.Second)
	ctx := context.Background()
	key := []byte(s.cfg.AuthSecret)
	const hs = `{"alg":"HS256","typ":"JWT"}`

	for i, alias := range []string{`"+1001"`, `"01001"`, `" 1001"`, `"1001.0"`} {
		_, err := s.orders.PlaceOrder(ctx, authed(&seckillv1.PlaceOrderRequest{ActivityId: act, SkuId: 1,
			RequestId: "alias-" + strconv.Itoa(i)}, rawToken(key, hs, claimsJSON(alias))))
		wantConnectCode(t, "PlaceOrder as sub "+alias, err, connect.CodeUnauthenticated, "sub must be the canonical decimal user id")
	}
	res, err := s.place(ctx, 1001, act, "real-1001")
	if err != nil || res.GetOrderId() == "" {
		t.Fatalf("the real user 1001 after the aliases: %v %v", res, err)
	}
	if n := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, act); n > 1 {
		t.Fatalf("%d orders of the activity, want at most the real 1001's", n)
	}

	for what, tok := range map[string]string{
		`"SCOPE":"admin"`:   rawToken(key, hs, claimsJSON(`"7"`, `"SCOPE":"admin"`)),
		`"Scope":"admin"`:   rawToken(key, hs, claimsJSON(`"7"`, `"Scope":"admin"`)),
		"admin after a tab": rawToken(key, hs, claimsJSON(`"7"`, `"scope":"buyer\tadmin"`)),
	} {
		_, err := s.admin.GetStockReport(ctx, authed(&seckillv1.GetStockReportRequest{ActivityId: act, SkuId: 1}, tok))
		wantConnectCode(t, what+" on the AdminService", err, connect.CodePermissionDenied, "admin scope required")
	}
	_, err = s.admin.GetStockReport(ctx, authed(&seckillv1.GetStockReportRequest{ActivityId: act, SkuId: 1},
		rawToken(key, hs, claimsJSON(`"7"`, `"scope":"payment"`, `"scope":"admin"`))))
	wantConnectCode(t, "scope twice", err, connect.CodeUnauthenticated, "duplicate JSON member")

	_, err = s.orders.PlaceOrder(ctx, authed(&seckillv1.PlaceOrderRequest{ActivityId: act, SkuId: 1, RequestId: "payer"}, s.paymentToken()))
	wantConnectCode(t, "PlaceOrder with a payment token", err, connect.CodePermissionDenied, "payment token may call only PayOrder")
	_, err = s.orders.GetOrder(ctx, authed(&seckillv1.GetOrderRequest{OrderId: res.GetOrderId()}, s.paymentToken()))
	wantConnectCode(t, "GetOrder with a payment token", err, connect.CodePermissionDenied, "payment token may call only PayOrder")
}

// testIDP is an identity provider on loopback serving a JWKS that the
// test changes.
type testIDP struct {
	mu   sync.Mutex
	keys map[string]crypto.Signer
	srv  *httptest.Server
}

func newTestIDP(t *testing.T) *testIDP {
	t.Helper()
	p := &testIDP{keys: map[string]crypto.Signer{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		var set jwkset.JWKSMarshal
		for kid, k := range p.keys {
			j, err := jwkset.NewJWKFromKey(k.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			set.Keys = append(set.Keys, j.Marshal())
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *testIDP) add(kid string, k crypto.Signer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[kid] = k
}

func (p *testIDP) remove(kid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.keys, kid)
}

// idpToken signs a token of user (scope admin when admin) with k under kid.
func idpToken(t *testing.T, method jwt.SigningMethod, kid string, k crypto.Signer, user int64, admin bool) string {
	t.Helper()
	c := jwt.MapClaims{"sub": strconv.FormatInt(user, 10), "iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix(),
		"iss": "https://idp.test", "aud": []string{"seckill"}}
	if admin {
		c["scope"] = "admin"
	}
	tok := jwt.NewWithClaims(method, c)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuthJWKSModeEndToEnd: a service started with SECKILL_AUTH_JWKS (a
// URL on loopback) accepts RS256, ES256 and EdDSA tokens of the provider,
// refuses HS256 ones (even signed with its SECKILL_AUTH_SECRET) and a
// wrong issuer, takes a key the provider adds at once (unknown kid: an
// early re-read) and stops taking a key the provider removed after a
// refresh interval, without a restart.
func TestAuthJWKSModeEndToEnd(t *testing.T) {
	p := newTestIDP(t)
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	es, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.add("rs-1", rs)
	p.add("es-1", es)
	p.add("ed-1", ed)
	s := startSystem(t, options{configure: func(c *config.Config) {
		c.Auth.JWKS, c.Auth.JWKSRefresh = p.srv.URL, time.Second
		c.Auth.Issuer, c.Auth.Audience = "https://idp.test", "seckill"
	}})
	ctx := context.Background()
	const act = 9102
	now := time.Now()
	_, err = s.admin.CreateActivity(ctx, authed(&seckillv1.CreateActivityRequest{
		ActivityId: act, SkuId: 1, Stock: 10, StartsAt: tsOf(now.Add(-time.Minute)), EndsAt: tsOf(now.Add(time.Hour)),
		PaymentTimeout: durOf(time.Minute), ReservationTtl: durOf(30 * time.Second),
	}, idpToken(t, jwt.SigningMethodRS256, "rs-1", rs, 1, true)))
	if err != nil {
		t.Fatalf("CreateActivity with the provider's RS256 admin token: %v", err)
	}
	place := func(tok, req string) error {
		_, err := s.orders.PlaceOrder(ctx, authed(&seckillv1.PlaceOrderRequest{ActivityId: act, SkuId: 1, RequestId: req}, tok))
		return err
	}
	for i, c := range []struct {
		method jwt.SigningMethod
		kid    string
		key    crypto.Signer
	}{{jwt.SigningMethodRS256, "rs-1", rs}, {jwt.SigningMethodES256, "es-1", es}, {jwt.SigningMethodEdDSA, "ed-1", ed}} {
		if err := place(idpToken(t, c.method, c.kid, c.key, int64(2001+i), false), "jwks-"+c.kid); err != nil {
			t.Fatalf("PlaceOrder with a %s token: %v", c.method.Alg(), err)
		}
	}
	wantConnectCode(t, "HS256 with the service's own secret", place(s.token(2010, false), "hs"), connect.CodeUnauthenticated, `alg "HS256" is not accepted`)
	wrongIss := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"sub": "2011", "exp": time.Now().Add(time.Hour).Unix(), "iss": "https://evil.test", "aud": "seckill"})
	wrongIss.Header["kid"] = "rs-1"
	wi, err := wrongIss.SignedString(rs)
	if err != nil {
		t.Fatal(err)
	}
	wantConnectCode(t, "wrong issuer", place(wi, "iss"), connect.CodeUnauthenticated, "issuer")

	// Rotation: a new key is taken at once, without a restart.
	rs2, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p.add("rs-2", rs2)
	if err := place(idpToken(t, jwt.SigningMethodRS256, "rs-2", rs2, 2020, false), "rotated"); err != nil {
		t.Fatalf("PlaceOrder with the added key: %v", err)
	}
	// The old key is removed: refused once the set was re-read (1 s).
	p.remove("rs-1")
	var last error
	s.eventually(30*time.Second, "a token of the removed key refused", func() bool {
		_, last = s.orders.GetOrder(ctx, authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"},
			idpToken(t, jwt.SigningMethodRS256, "rs-1", rs, 2100, false)))
		return connect.CodeOf(last) == connect.CodeUnauthenticated
	})
	wantConnectCode(t, "the removed key", last, connect.CodeUnauthenticated, "kid is not in the key set")
	if err := place(idpToken(t, jwt.SigningMethodRS256, "rs-2", rs2, 2021, false), "rotated-2"); err != nil {
		t.Fatalf("the remaining key after the removal: %v", err)
	}
}

// TestAuthLocalStackRuleAndOpsToken: the public development secret is
// refused without SECKILL_LOCAL_STACK=true even with the API on
// 127.0.0.1, and accepted (and verifying tokens on the running service)
// with it; outside the local stack an ops token is required, and a
// service with one answers /metrics only to a caller that presents it;
// a JWKS that cannot be read stops the start with an error naming the
// variable.
func TestAuthLocalStackRuleAndOpsToken(t *testing.T) {
	base := map[string]string{"SECKILL_HTTP_ADDR": "127.0.0.1:0", "SECKILL_OPS_ADDR": "127.0.0.1:0"}
	lookup := func(extra ...string) func(string) (string, bool) {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	if _, err := config.Load(lookup("SECKILL_OPS_TOKEN", "ops-token-0123456789abc")); err == nil ||
		!strings.Contains(err.Error(), "SECKILL_LOCAL_STACK") {
		t.Fatalf("development secret on 127.0.0.1 without the local stack: %v", err)
	}
	if _, err := config.Load(lookup("SECKILL_AUTH_SECRET", "own-secret-0123456789")); err == nil ||
		!strings.Contains(err.Error(), "set SECKILL_OPS_TOKEN or run on the local stack") {
		t.Fatalf("no ops token outside the local stack: %v", err)
	}
	if _, err := config.Load(lookup("SECKILL_LOCAL_STACK", "true")); err != nil {
		t.Fatalf("development secret on the local stack: %v", err)
	}

	// The running service on the local stack with the development secret.
	dev := startSystem(t, options{configure: func(c *config.Config) { c.AuthSecret, c.LocalStack = config.DevAuthSecret, true }})
	tok, err := api.MintToken([]byte(config.DevAuthSecret), 3001, false, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = dev.orders.GetOrder(context.Background(), authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
	if c := connect.CodeOf(err); c == connect.CodeUnauthenticated || c == connect.CodePermissionDenied {
		t.Fatalf("a development-secret token on the local stack: %v", err)
	}

	// A service with an ops token.
	const opsToken = "ops-token-0123456789abcdef"
	s := startSystem(t, options{configure: func(c *config.Config) { c.OpsToken, c.LocalStack, c.OpsPprof = opsToken, false, true }})
	getPath := func(sys *system, path, bearer string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+sys.app.OpsAddr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := s.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	get := func(bearer string) int { return getPath(s, "/metrics", bearer) }
	if code := get(""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the ops token: %d, want 401", code)
	}
	if code := get("wrong-token-0123456789abcdef"); code != http.StatusUnauthorized {
		t.Fatalf("/metrics with a wrong ops token: %d, want 401", code)
	}
	if code := get(opsToken); code != http.StatusOK {
		t.Fatalf("/metrics with the ops token: %d, want 200", code)
	}
	// The runtime profiles (SECKILL_OPS_PPROF): behind the same token, and
	// not served unless asked for.
	if code := getPath(s, "/debug/pprof/goroutine?debug=1", ""); code != http.StatusUnauthorized {
		t.Fatalf("/debug/pprof/ without the ops token: %d, want 401", code)
	}
	if code := getPath(s, "/debug/pprof/goroutine?debug=1", opsToken); code != http.StatusOK {
		t.Fatalf("/debug/pprof/ with the ops token: %d, want 200", code)
	}
	if code := getPath(dev, "/debug/pprof/goroutine?debug=1", ""); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without SECKILL_OPS_PPROF: %d, want 404", code)
	}

	// A JWKS that cannot be read: the authenticator the server is built
	// with (and so the service) does not start.
	cfg := s.cfg
	cfg.Auth.JWKS, cfg.Auth.JWKSRefresh = "http://127.0.0.1:1/jwks.json", time.Minute
	_, err = bootstrap.NewAuthenticator(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "SECKILL_AUTH_JWKS") {
		t.Fatalf("unreadable JWKS: %v, want an error naming SECKILL_AUTH_JWKS", err)
	}
}
