package api_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-dev/seckill/adapters/api"
)

// signer is one key of a test identity provider.
type signer struct {
	kid    string
	method jwt.SigningMethod
	key    crypto.Signer
}

func newRSA(t *testing.T, kid string) signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid, jwt.SigningMethodRS256, k}
}

func newEC(t *testing.T, kid string, curve elliptic.Curve, method jwt.SigningMethod) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid, method, k}
}

func newEd(t *testing.T, kid string) signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid, jwt.SigningMethodEdDSA, k}
}

// token signs claims for user 1001 (valid for an hour from now) with s,
// naming s.kid.
func (s signer) token(t *testing.T, now time.Time, extra jwt.MapClaims) string {
	t.Helper()
	c := jwt.MapClaims{"sub": "1001", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	tok := jwt.NewWithClaims(s.method, c)
	tok.Header["kid"] = s.kid
	out, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// es256WithP384 signs a token whose header says ES256 with the P-384 key
// of s (SHA-256 digest, r and s of 48 bytes each): jwt refuses to make
// one, an attacker would not.
func es256WithP384(t *testing.T, s signer, now time.Time) string {
	t.Helper()
	in := b64(`{"alg":"ES256","kid":"`+s.kid+`"}`) + "." + b64(`{"sub":"1001","exp":`+jsonInt(now.Add(time.Hour).Unix())+`}`)
	sum := sha256.Sum256([]byte(in))
	r, ss, err := ecdsa.Sign(rand.Reader, s.key.(*ecdsa.PrivateKey), sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 96)
	r.FillBytes(sig[:48])
	ss.FillBytes(sig[48:])
	return in + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// jwksOf is the public JWKS document of signers; alg, when set, is
// written into every key's "alg".
func jwksOf(t *testing.T, alg string, signers ...signer) []byte {
	t.Helper()
	var set jwkset.JWKSMarshal
	for _, s := range signers {
		k, err := jwkset.NewJWKFromKey(s.key.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: s.kid, ALG: jwkset.ALG(alg)}})
		if err != nil {
			t.Fatal(err)
		}
		set.Keys = append(set.Keys, k.Marshal())
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// idp serves a JWKS on loopback; set and fail change what it answers.
type idp struct {
	mu     sync.Mutex
	doc    []byte
	status int
	hits   int
	srv    *httptest.Server
}

func newIDP(t *testing.T, doc []byte) *idp {
	t.Helper()
	p := &idp{doc: doc, status: http.StatusOK}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.hits++
		w.WriteHeader(p.status)
		_, _ = w.Write(p.doc)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) set(doc []byte, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.doc, p.status = doc, status
}

func (p *idp) reads() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func jwksAuth(t *testing.T, location string, refresh time.Duration, clk *clock) *api.Authenticator {
	t.Helper()
	a, err := api.NewAuthenticatorWith(context.Background(), api.AuthOptions{JWKS: location, JWKSRefresh: refresh, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAuthJWKSAlgorithms: in JWKS mode RS256, ES256 and EdDSA tokens
// signed with a key of the set verify; HS256 (also "signed" with the
// public key's bytes as the secret), none, a missing or unknown kid, a
// key of another type than the alg, a P-384 key for ES256 and a key whose
// own alg differs are refused.
func TestAuthJWKSAlgorithms(t *testing.T) {
	clk := &clock{now: time.Now()}
	rs, es, ed := newRSA(t, "rsa-1"), newEC(t, "ec-1", elliptic.P256(), jwt.SigningMethodES256), newEd(t, "ed-1")
	p384 := newEC(t, "ec-384", elliptic.P384(), jwt.SigningMethodES384)
	p := newIDP(t, jwksOf(t, "", rs, es, ed, p384))
	a := jwksAuth(t, p.srv.URL, time.Minute, clk)
	for _, s := range []signer{rs, es, ed} {
		id, err := a.Verify(s.token(t, clk.Now(), jwt.MapClaims{"scope": "admin"}))
		if err != nil || id.UserID != 1001 || !id.Admin {
			t.Errorf("%s token: %+v, %v", s.method.Alg(), id, err)
		}
	}

	now := clk.Now()
	claims := jwt.MapClaims{"sub": "1001", "exp": now.Add(time.Hour).Unix()}
	der, err := x509.MarshalPKIXPublicKey(rs.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	for what, key := range map[string][]byte{"PEM": pemKey, "DER": der, "JWKS": jwksOf(t, "", rs), "test secret": secret} {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		tok.Header["kid"] = rs.kid
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, "HS256 signed with the "+what, second(a.Verify(s)), `alg "HS256" is not accepted`)
	}
	refused(t, "alg none", second(a.Verify(b64(`{"alg":"none","kid":"rsa-1"}`)+"."+b64(`{"sub":"1001","exp":9999999999}`)+".")), `alg "none"`)
	// An RS256 token whose signature is the HMAC of the public key.
	hmacd := rawHS256(pemKey, `{"alg":"RS256","kid":"rsa-1"}`, `{"sub":"1001","exp":`+jsonInt(now.Add(time.Hour).Unix())+`}`)
	refused(t, "RS256 header over an HMAC", second(a.Verify(hmacd)), "signature")

	noKid := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	s, err := noKid.SignedString(rs.key)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, "no kid", second(a.Verify(s)), "kid is required")
	refused(t, "unknown kid", second(a.Verify(signer{"rsa-2", rs.method, rs.key}.token(t, now, nil))), "kid is not in the key set")
	// The kid of one key, the alg (and signature) of another type.
	refused(t, "ES256 under an RSA kid", second(a.Verify(signer{"rsa-1", es.method, es.key}.token(t, now, nil))), "RSA key does not verify ES256")
	refused(t, "EdDSA under an EC kid", second(a.Verify(signer{"ec-1", ed.method, ed.key}.token(t, now, nil))), "does not verify EdDSA")
	refused(t, "RS256 under an Ed25519 kid", second(a.Verify(signer{"ed-1", rs.method, rs.key}.token(t, now, nil))), "RS256")
	refused(t, "ES384", second(a.Verify(p384.token(t, now, nil))), `alg "ES384" is not accepted`)
	refused(t, "ES256 header, P-384 key", second(a.Verify(es256WithP384(t, p384, now))), "P-384")

	// A key whose own alg is set verifies that alg only.
	rsAlg := newRSA(t, "rsa-alg")
	p.set(jwksOf(t, "RS384", rsAlg), http.StatusOK)
	b := jwksAuth(t, p.srv.URL, time.Minute, clk)
	refused(t, "RS256 token, key alg RS384", second(b.Verify(rsAlg.token(t, now, nil))), "does not match")

	// The strict rules hold in JWKS mode too.
	refused(t, "non-canonical sub", second(a.Verify(rs.token(t, now, jwt.MapClaims{"sub": "+1001"}))), "sub must be the canonical decimal user id")
}

// TestAuthJWKSRotationByURL: a key added to the set verifies after the
// next re-read, a removed one stops verifying after it; a token with an
// unknown kid triggers at most one early re-read per 30 s; nothing
// restarts. A failed re-read keeps the last keys.
func TestAuthJWKSRotationByURL(t *testing.T) {
	clk := &clock{now: time.Now()}
	a1, b1, c1 := newRSA(t, "a"), newEC(t, "b", elliptic.P256(), jwt.SigningMethodES256), newEd(t, "c")
	p := newIDP(t, jwksOf(t, "", a1))
	a := jwksAuth(t, p.srv.URL, 5*time.Minute, clk)
	ok := func(what string, s signer) {
		t.Helper()
		if _, err := a.Verify(s.token(t, clk.Now(), nil)); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	no := func(what string, s signer) {
		t.Helper()
		refused(t, what, second(a.Verify(s.token(t, clk.Now(), nil))), "kid is not in the key set")
	}
	ok("a at start", a1)
	no("b before it is published (takes the early re-read)", b1)
	reads := p.reads()

	p.set(jwksOf(t, "", a1, b1), http.StatusOK)
	clk.advance(10 * time.Second)
	no("b published, early re-read used 10 s ago", b1)
	if p.reads() != reads {
		t.Fatalf("JWKS read %d times more within the early re-read limit", p.reads()-reads)
	}
	clk.advance(5 * time.Minute)
	ok("b after the refresh interval", b1)

	p.set(jwksOf(t, "", b1), http.StatusOK)
	clk.advance(time.Second)
	ok("a removed, not yet re-read", a1)
	clk.advance(5 * time.Minute)
	no("a after the refresh interval", a1)
	ok("b still", b1)

	// An unknown kid re-reads early once the limit allows.
	p.set(jwksOf(t, "", b1, c1), http.StatusOK)
	clk.advance(time.Minute)
	ok("c at once through the early re-read", c1)

	// The provider fails: the keys in hand stay, and the next good read
	// applies.
	p.set([]byte("oops"), http.StatusInternalServerError)
	clk.advance(6 * time.Minute)
	ok("b while the provider fails", b1)
	p.set(jwksOf(t, "", c1), http.StatusOK)
	clk.advance(10 * time.Second)
	no("b after the provider is back", b1)
	ok("c", c1)
}

// TestAuthJWKSRotationByFile: the same with the set in a file, re-read
// every refresh interval.
func TestAuthJWKSRotationByFile(t *testing.T) {
	clk := &clock{now: time.Now()}
	a1, b1 := newEd(t, "a"), newRSA(t, "b")
	path := filepath.Join(t.TempDir(), "jwks.json")
	write := func(doc []byte) {
		t.Helper()
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(jwksOf(t, "", a1))
	a := jwksAuth(t, path, time.Minute, clk)
	if _, err := a.Verify(a1.token(t, clk.Now(), nil)); err != nil {
		t.Fatal(err)
	}
	write(jwksOf(t, "", b1))
	clk.advance(time.Minute)
	if _, err := a.Verify(b1.token(t, clk.Now(), nil)); err != nil {
		t.Fatalf("added key after the refresh: %v", err)
	}
	refused(t, "removed key after the refresh", second(a.Verify(a1.token(t, clk.Now(), nil))), "kid is not in the key set")
}

// TestAuthJWKSThatCannotLoad: a set that cannot be read at start, or
// holds no usable key, is an error of NewAuthenticatorWith.
func TestAuthJWKSThatCannotLoad(t *testing.T) {
	rs := newRSA(t, "r")
	bad := newIDP(t, []byte("nope"))
	bad.set([]byte("nope"), http.StatusNotFound)
	empty := newIDP(t, []byte(`{"keys":[]}`))
	noKid := newIDP(t, jwksOf(t, "", signer{"", rs.method, rs.key}))
	garbage := newIDP(t, []byte(`{"keys":`))
	for what, c := range map[string]struct{ location, want string }{
		"HTTP 404":     {bad.srv.URL, "404"},
		"empty set":    {empty.srv.URL, "no usable key"},
		"keys w/o kid": {noKid.srv.URL, "no usable key"},
		"not JSON":     {garbage.srv.URL, "parse JWKS"},
		"no file":      {filepath.Join(t.TempDir(), "missing.json"), "no such file"},
		"closed port":  {"http://127.0.0.1:1/jwks", "fetch JWKS"},
	} {
		_, err := api.NewAuthenticatorWith(context.Background(), api.AuthOptions{JWKS: c.location, JWKSRefresh: time.Minute})
		refused(t, what, err, c.want)
	}
	_, err := api.NewAuthenticatorWith(context.Background(), api.AuthOptions{JWKS: empty.srv.URL})
	refused(t, "no refresh interval", err, "refresh interval")
	if !strings.HasPrefix(bad.srv.URL, "http://127.0.0.1:") {
		t.Fatalf("test provider not on loopback: %s", bad.srv.URL)
	}
}

// TestAuthVerifiedTokenCache: a token that verified is answered from the
// cache for at most VerifiedTokenTTL and never past its exp: after its
// key left the set (and the set was re-read) the very same token is
// still accepted within the TTL, a new token of that key is not, a token
// differing in one byte is not; once the TTL has passed the cached token
// is refused too, and a cached token stops at its exp. With the cache
// off, the removed key's token is refused at the re-read.
func TestAuthVerifiedTokenCache(t *testing.T) {
	for _, cached := range []bool{true, false} {
		clk := &clock{now: time.Now()}
		k1, k2 := newRSA(t, "k1"), newRSA(t, "k2")
		p := newIDP(t, jwksOf(t, "", k1, k2))
		o := api.AuthOptions{JWKS: p.srv.URL, JWKSRefresh: 10 * time.Second, Now: clk.Now}
		if !cached {
			o.VerifiedTokens = -1
		}
		a, err := api.NewAuthenticatorWith(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		tok := k1.token(t, clk.Now(), nil)
		short := k2.token(t, clk.Now(), jwt.MapClaims{"exp": clk.Now().Add(20 * time.Second).Unix()})
		for _, s := range []string{tok, short} {
			if _, err := a.Verify(s); err != nil {
				t.Fatalf("cached %v: first verification: %v", cached, err)
			}
		}
		p.set(jwksOf(t, "", k2), http.StatusOK) // k1 leaves the set
		clk.advance(15 * time.Second)
		refused(t, "a new token of the removed key", second(a.Verify(k1.token(t, clk.Now(), nil))), "kid is not in the key set")
		i := strings.LastIndexByte(tok, '.') + 5 // a byte inside the signature
		flip := byte('A')
		if tok[i] == 'A' {
			flip = 'B'
		}
		tampered := tok[:i] + string(flip) + tok[i+1:]
		refused(t, "the cached token with one byte changed", second(a.Verify(tampered)), "")
		id, err := a.Verify(tok)
		switch {
		case cached && (err != nil || id.UserID != 1001):
			t.Fatalf("the cached token within the TTL after its key left: %v %+v", err, id)
		case !cached:
			refused(t, "without the cache, the removed key's token after the re-read", err, "kid is not in the key set")
		}
		clk.advance(10 * time.Second) // 25 s: past the short token's exp
		refused(t, "a cached token past its exp", second(a.Verify(short)), "expired")
		clk.advance(api.VerifiedTokenTTL)
		refused(t, "the cached token past the TTL", second(a.Verify(tok)), "kid is not in the key set")
	}
}
