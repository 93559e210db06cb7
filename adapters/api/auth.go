package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	// Payment is true when the token's scope contains "payment".
	Payment bool
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

// claims are the JWT claims the service reads.
type claims struct {
	Scope string `json:"scope,omitempty"`
	jwt.RegisteredClaims
}

// Authenticator verifies `Authorization: Bearer <JWT>` headers: HS256
// signed with the shared secret, `exp` required and in the future, `sub`
// a decimal user id > 0, at most MaxTokenBytes long. The space separated
// `scope` claim may hold "admin" and "payment".
type Authenticator struct {
	secret []byte
	now    func() time.Time
}

// NewAuthenticator returns an Authenticator for secret (at least 16 bytes).
func NewAuthenticator(secret []byte) (*Authenticator, error) {
	if len(secret) < 16 {
		return nil, errors.New("auth secret must be at least 16 bytes")
	}
	return &Authenticator{secret: secret, now: time.Now}, nil
}

// Verify parses and checks a bearer token and returns the identity.
func (a *Authenticator) Verify(token string) (Identity, error) {
	if len(token) > MaxTokenBytes {
		return Identity{}, fmt.Errorf("invalid token: longer than %d bytes", MaxTokenBytes)
	}
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return a.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(a.now),
	)
	if err != nil {
		return Identity{}, fmt.Errorf("invalid token: %w", err)
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || uid <= 0 {
		return Identity{}, errors.New("invalid token: sub must be a decimal user id > 0")
	}
	return Identity{UserID: uid, Admin: hasScope(c.Scope, ScopeAdmin), Payment: hasScope(c.Scope, ScopePayment)}, nil
}

func hasScope(scopes, want string) bool {
	for _, s := range strings.Fields(scopes) {
		if s == want {
			return true
		}
	}
	return false
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
	c := claims{Scope: strings.Join(scopes, " "), RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// Middleware authenticates a request from its headers alone, before any
// of its body is read: a missing, oversized or invalid token is answered
// Unauthenticated in the caller's protocol (Connect, gRPC or gRPC-Web)
// without touching the body. The identity is stored in the request's
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
		id, err := a.Verify(strings.TrimSpace(token))
		if err != nil {
			refuse(w, r, ew, connect.NewError(connect.CodeUnauthenticated, errors.New("invalid or expired token")))
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
	adminPrefix = "/" + seckillv1connect.AdminServiceName + "/"
	payOrder    = seckillv1connect.OrderServicePayOrderProcedure
)

// authorize checks the caller's scopes against the procedure: the admin
// service needs "admin"; PayOrder needs "payment" or "admin"; the other
// order calls need only a valid token.
func authorize(procedure string, id Identity) error {
	switch {
	case strings.HasPrefix(procedure, adminPrefix) && !id.Admin:
		return connect.NewError(connect.CodePermissionDenied, errors.New("admin scope required"))
	case procedure == payOrder && !id.Admin && !id.Payment:
		return connect.NewError(connect.CodePermissionDenied, errors.New("payment or admin scope required: payments are confirmed by the payment side"))
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
