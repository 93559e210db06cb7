package connect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
)

// Identity is the authenticated caller.
type Identity struct {
	// UserID is the token's subject: the buyer's user id.
	UserID int64
	// Admin is true when the token's scope contains "admin".
	Admin bool
}

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
// a decimal user id > 0. Tokens whose `scope` (space separated) contains
// "admin" are admin tokens.
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
	return Identity{UserID: uid, Admin: hasScope(c.Scope, "admin")}, nil
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
	if userID <= 0 {
		return "", errors.New("user id must be > 0")
	}
	c := claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	if admin {
		c.Scope = "admin"
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	return s, nil
}

// Interceptor authenticates every call: a missing or invalid token gives
// Unauthenticated; a procedure of an admin service (adminPrefix) called
// without the admin scope gives PermissionDenied. The identity is stored
// in the context for handlers.
func (a *Authenticator) Interceptor(adminPrefix string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			h := req.Header().Get("Authorization")
			token, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || token == "" {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("missing bearer token"))
			}
			id, err := a.Verify(strings.TrimSpace(token))
			if err != nil {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("invalid or expired token"))
			}
			if strings.HasPrefix(req.Spec().Procedure, adminPrefix) && !id.Admin {
				return nil, connect.NewError(connect.CodePermissionDenied, errors.New("admin scope required"))
			}
			return next(WithIdentity(ctx, id), req)
		}
	}
}
