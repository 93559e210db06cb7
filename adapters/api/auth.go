package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Token scopes the service knows.
const (
	// ScopeAdmin grants the AdminService and every OrderService call.
	ScopeAdmin = "admin"
	// ScopePayment grants PayOrder: the payment provider's callback
	// service confirms payments, never a buyer.
	ScopePayment = "payment"
	// ScopeEvents grants EventService: a projection consumer reads the
	// order events; with "events" alone it may call nothing else.
	ScopeEvents = "events"
)

// MaxTokenBytes bounds the bearer token read from the Authorization
// header; a longer one is refused before it is parsed.
const MaxTokenBytes = 4096

// Identity is the authenticated caller.
type Identity struct {
	// UserID is the token's subject: the buyer's (or operator's) user id.
	UserID int64
	// Admin is true when the token's scope contains "admin".
	Admin bool
	// Payment is true when the token's scope contains "payment". Without
	// Admin the caller is a payment principal: PayOrder is all it may
	// call.
	Payment bool
	// Events is true when the token's scope contains "events". Without
	// Admin the caller is a projection consumer: EventService is all it
	// may call (with Payment too, PayOrder as well).
	Events bool
}

// Actor names the caller in audit records ("user:<id>").
func (id Identity) Actor() string { return "user:" + strconv.FormatInt(id.UserID, 10) }

type identityKey struct{}

// IdentityFrom returns the identity the Authenticator stored in ctx.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// WithIdentity returns ctx carrying id (for tests of handlers).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// ClockLeeway is how far in the future a token's "iat" and "nbf" may lie
// (the clocks of the issuer and of the service differ a little). "exp"
// has no leeway.
const ClockLeeway = 30 * time.Second

// DefaultMaxTokenLifetime is the longest validity accepted when
// AuthOptions.MaxLifetime is zero.
const DefaultMaxTokenLifetime = 24 * time.Hour

// AuthOptions configure an Authenticator.
type AuthOptions struct {
	// Secret is the HS256 key (at least 16 bytes) of the mode without
	// JWKS.
	Secret []byte
	// JWKS is an http(s) URL or a file path of a JSON Web Key Set; when
	// set, tokens are RS256, ES256 or EdDSA signed with a key of the set
	// (chosen by kid), and HS256 tokens are refused.
	JWKS string
	// JWKSRefresh is how often the set is re-read (> 0 with JWKS).
	JWKSRefresh time.Duration
	// HTTPClient fetches a JWKS URL (nil: a client of its own that
	// refuses scheme-changing redirects). Every read is bounded by a 5 s
	// timeout.
	HTTPClient *http.Client
	// Issuer, when set, must equal the token's "iss".
	Issuer string
	// Audience, when set, must be one of the token's "aud".
	Audience string
	// MaxLifetime bounds how far "exp" may lie from "iat" and from now
	// (0: DefaultMaxTokenLifetime).
	MaxLifetime time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log receives the JWKS re-read failures (nil: discarded).
	Log *slog.Logger
	// VerifiedTokens bounds the cache of verified tokens (see
	// verifiedTokens: a token that verified is answered from it until
	// its exp, for at most VerifiedTokenTTL): 0 means
	// DefaultVerifiedTokens, a negative value disables the cache.
	VerifiedTokens int
}

// Authenticator verifies `Authorization: Bearer <JWT>` headers, at most
// MaxTokenBytes long, in one of two modes:
//
//   - shared secret (no JWKS): HS256 signed with the secret;
//   - JWKS: RS256, ES256 or EdDSA signed with the key of the set the
//     header's kid names, the key's type (and its own "alg", when set)
//     matching the token's alg. HS256 is refused, so a token "signed"
//     with a public key as an HMAC secret never verifies.
//
// "none" and every other algorithm are refused in both modes. The header
// and the payload are parsed strictly (claims.go): a duplicate JSON
// member anywhere is refused, claim names are case-sensitive, a "crit"
// header is refused. "exp" is required and in the future and at most
// MaxLifetime from "iat" and from now; "iat" and "nbf" may not lie more
// than ClockLeeway in the future; "iss" and "aud" must match when
// configured; "sub" must be the canonical decimal form of a user id > 0.
// The "scope" claim is split on ASCII spaces only and may hold "admin"
// "payment" and "events".
type Authenticator struct {
	secret      []byte
	set         *jwks // nil: shared-secret mode
	algs        []string
	issuer      string
	audience    string
	maxLifetime time.Duration
	now         func() time.Time
	headers     headerCache
	verified    *verifiedTokens // nil: every token verified in full
}

// NewAuthenticator returns an Authenticator of the shared-secret mode for
// secret (at least 16 bytes), with the default maximum token lifetime.
func NewAuthenticator(secret []byte) (*Authenticator, error) {
	return NewAuthenticatorWith(context.Background(), AuthOptions{Secret: secret})
}

// NewAuthenticatorWith returns an Authenticator for o. In JWKS mode the set
// is read once before it returns: a set that cannot be read or holds no
// usable key is an error. ctx bounds that first read; a re-read is
// bounded by the verification that starts it (and its 5 s timeout).
func NewAuthenticatorWith(ctx context.Context, o AuthOptions) (*Authenticator, error) {
	a := &Authenticator{issuer: o.Issuer, audience: o.Audience, maxLifetime: o.MaxLifetime, now: o.Now,
		verified: newVerifiedTokens(o.VerifiedTokens)}
	if a.maxLifetime == 0 {
		a.maxLifetime = DefaultMaxTokenLifetime
	}
	if a.maxLifetime < 0 {
		return nil, errors.New("maximum token lifetime must be > 0")
	}
	if a.now == nil {
		a.now = time.Now
	}
	if o.JWKS == "" {
		if len(o.Secret) < 16 {
			return nil, errors.New("auth secret must be at least 16 bytes")
		}
		a.secret = o.Secret
		a.algs = []string{jwt.SigningMethodHS256.Alg()}
	} else {
		set, err := newJWKS(ctx, o.JWKS, o.JWKSRefresh, o.HTTPClient, a.now, o.Log)
		if err != nil {
			return nil, err
		}
		a.set = set
		a.algs = []string{AlgRS256, AlgES256, AlgEdDSA}
	}
	return a, nil
}

// verifySignature checks the JWS signature of parts (header, payload,
// signature) with the library's signing method of h.Alg, which the caller
// checked is accepted, and the key of the mode: the shared secret, or the
// key set's key for h.Kid. The header and the claims are parsed strictly
// by this package (parseHeader, parseClaims), so the library's own parse
// of them (jwt.Parser) is not repeated here.
func (a *Authenticator) verifySignature(ctx context.Context, h tokenHeader, parts []string) error {
	method := jwt.GetSigningMethod(h.Alg)
	if method == nil {
		return fmt.Errorf("alg %q has no signing method", h.Alg)
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		return errors.New("signature is not base64url")
	}
	var key any = a.secret
	if a.set != nil {
		t := &jwt.Token{Header: map[string]any{"alg": h.Alg, "kid": h.Kid}, Method: method}
		if key, err = a.set.key(ctx, t, h.Alg); err != nil {
			return err
		}
	}
	if err := method.Verify(parts[0]+"."+parts[1], sig, key); err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	return nil
}

// Verify parses and checks a bearer token and returns the identity.
func (a *Authenticator) Verify(token string) (Identity, error) {
	return a.VerifyContext(context.Background(), token)
}

// VerifyContext is Verify with ctx bounding a JWKS re-read the
// verification may start.
func (a *Authenticator) VerifyContext(ctx context.Context, token string) (Identity, error) {
	id, err := a.verify(ctx, token)
	if err != nil {
		return Identity{}, fmt.Errorf("invalid token: %w", err)
	}
	return id, nil
}

func (a *Authenticator) verify(ctx context.Context, token string) (Identity, error) {
	if len(token) > MaxTokenBytes {
		return Identity{}, fmt.Errorf("longer than %d bytes", MaxTokenBytes)
	}
	now := a.now()
	if id, ok := a.verified.get(token, now); ok {
		return id, nil
	}
	id, exp, err := a.verifyFull(ctx, token)
	if err != nil {
		return Identity{}, err
	}
	a.verified.put(token, id, now, exp)
	return id, nil
}

// verifyFull checks token in full and returns its identity and exp.
func (a *Authenticator) verifyFull(ctx context.Context, token string) (Identity, time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Identity{}, time.Time{}, errors.New("not a compact JWS (three base64url parts separated by dots)")
	}
	h, err := a.headers.parse(parts[0])
	if err != nil {
		return Identity{}, time.Time{}, err
	}
	if !slices.Contains(a.algs, h.Alg) {
		return Identity{}, time.Time{}, fmt.Errorf("alg %q is not accepted (accepted: %s)", h.Alg, strings.Join(a.algs, ", "))
	}
	if a.set != nil && h.Kid == "" {
		return Identity{}, time.Time{}, errors.New("kid is required")
	}
	if err := a.verifySignature(ctx, h, parts); err != nil {
		return Identity{}, time.Time{}, err
	}
	pb, err := base64.RawURLEncoding.Strict().DecodeString(parts[1])
	if err != nil {
		return Identity{}, time.Time{}, errors.New("payload is not base64url")
	}
	c, err := parseClaims(pb)
	if err != nil {
		return Identity{}, time.Time{}, err
	}
	if err := a.checkTimes(c); err != nil {
		return Identity{}, time.Time{}, err
	}
	if a.issuer != "" && c.Issuer != a.issuer {
		return Identity{}, time.Time{}, fmt.Errorf("iss %q is not the configured issuer", c.Issuer)
	}
	if a.audience != "" && !slices.Contains(c.Audience, a.audience) {
		return Identity{}, time.Time{}, errors.New("aud does not contain the configured audience")
	}
	uid, err := canonicalUserID(c.Subject)
	if err != nil {
		return Identity{}, time.Time{}, err
	}
	id := Identity{UserID: uid}
	for _, s := range scopes(c.Scope) {
		switch s {
		case ScopeAdmin:
			id.Admin = true
		case ScopePayment:
			id.Payment = true
		case ScopeEvents:
			id.Events = true
		}
	}
	return id, c.Expires, nil
}

// checkTimes applies the time rules: exp in the future and at most the
// maximum lifetime from iat and from now, iat and nbf not beyond
// ClockLeeway in the future.
func (a *Authenticator) checkTimes(c tokenClaims) error {
	now := a.now()
	if !now.Before(c.Expires) {
		return errors.New("token is expired")
	}
	if c.Expires.Sub(now) > a.maxLifetime {
		return fmt.Errorf("exp lies more than %s from now", a.maxLifetime)
	}
	if !c.IssuedAt.IsZero() {
		if c.IssuedAt.After(now.Add(ClockLeeway)) {
			return errors.New("iat lies in the future")
		}
		if c.Expires.Sub(c.IssuedAt) > a.maxLifetime {
			return fmt.Errorf("exp lies more than %s after iat", a.maxLifetime)
		}
	}
	if !c.NotBefore.IsZero() && c.NotBefore.After(now.Add(ClockLeeway)) {
		return errors.New("token is not valid yet (nbf)")
	}
	return nil
}

// MintToken signs a token for userID valid for ttl from now; admin adds
// the admin scope. It is meant for local use (`seckill token`) and tests.
func MintToken(secret []byte, userID int64, admin bool, ttl time.Duration, now time.Time) (string, error) {
	var scopes []string
	if admin {
		scopes = append(scopes, ScopeAdmin)
	}
	return MintScopedToken(secret, userID, scopes, ttl, now)
}

// MintScopedToken signs a token for userID with the given scopes, valid
// for ttl from now. It is meant for local use and tests.
func MintScopedToken(secret []byte, userID int64, scopes []string, ttl time.Duration, now time.Time) (string, error) {
	if userID <= 0 {
		return "", errors.New("user id must be > 0")
	}
	c := jwt.MapClaims{
		"sub": strconv.FormatInt(userID, 10),
		"iat": now.Unix(),
		"exp": now.Add(ttl).Unix(),
	}
	if len(scopes) > 0 {
		c["scope"] = strings.Join(scopes, " ")
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// Middleware authenticates a request from its headers alone, before any
// of its body is read: a missing, oversized or invalid token is answered
// Unauthenticated, with the reason, in the caller's protocol (Connect,
// gRPC or gRPC-Web) without touching the body. The identity is stored in the request's
// context for the interceptor and the handlers.
func (a *Authenticator) Middleware(next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || strings.TrimSpace(token) == "" {
			refuse(w, r, ew, connect.NewError(connect.CodeUnauthenticated, errors.New("missing bearer token")))
			return
		}
		id, err := a.VerifyContext(r.Context(), strings.TrimSpace(token))
		if err != nil {
			refuse(w, r, ew, connect.NewError(connect.CodeUnauthenticated, err))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// refuse answers err in the request's protocol (plain HTTP 4xx for a
// request that is none of them) and closes the connection for an HTTP/1
// request whose body was not read.
func refuse(w http.ResponseWriter, r *http.Request, ew *connect.ErrorWriter, err *connect.Error) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	if ew.IsSupported(r) {
		_ = ew.Write(w, r, err)
		return
	}
	code := http.StatusBadRequest
	switch err.Code() {
	case connect.CodeUnauthenticated:
		code = http.StatusUnauthorized
	case connect.CodeResourceExhausted:
		code = http.StatusTooManyRequests
	}
	http.Error(w, err.Message(), code)
}

// procedures that need a scope beyond a valid token.
var (
	adminPrefix  = "/" + seckillv1connect.AdminServiceName + "/"
	eventsPrefix = "/" + seckillv1connect.EventServiceName + "/"
	payOrder     = seckillv1connect.OrderServicePayOrderProcedure
)

// authorize checks the caller's scopes against the procedure: "admin"
// grants everything; the admin service needs "admin"; PayOrder needs
// "payment" or "admin"; EventService needs "events" or "admin"; the other
// order calls need only a valid token. A payment principal (a token with
// "payment" and without "admin") may call PayOrder and nothing else, a
// projection consumer (a token with "events" and without "admin")
// EventService and nothing else; a token with both may call both.
func authorize(procedure string, id Identity) error {
	events := strings.HasPrefix(procedure, eventsPrefix)
	denied := func(msg string) error { return connect.NewError(connect.CodePermissionDenied, errors.New(msg)) }
	switch {
	case id.Admin, events && id.Events, procedure == payOrder && id.Payment:
		return nil
	case id.Payment && id.Events:
		return denied("a payment and events token may call only PayOrder and EventService")
	case id.Payment:
		return denied("a payment token may call only PayOrder")
	case id.Events:
		return denied("an events token may call only EventService")
	case events:
		return denied("events or admin scope required: the order events are served to projection consumers, not to buyers")
	case strings.HasPrefix(procedure, adminPrefix):
		return denied("admin scope required")
	case procedure == payOrder:
		return denied("payment or admin scope required: payments are confirmed by the payment side")
	}
	return nil
}

// authzInterceptor enforces authorize on every call; a call without an
// identity (the middleware did not run) is Unauthenticated.
func authzInterceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			id, ok := IdentityFrom(ctx)
			if !ok {
				return nil, connect.NewError(connect.CodeUnauthenticated, errNoIdentity)
			}
			if err := authorize(req.Spec().Procedure, id); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}
	}
}
