package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
)

// The JWKS algorithms: the only ones accepted in JWKS mode.
const (
	AlgRS256 = "RS256"
	AlgES256 = "ES256"
	AlgEdDSA = "EdDSA"
)

const (
	// maxJWKSBytes bounds a JWKS document read from a URL or a file.
	maxJWKSBytes = 1 << 20
	// jwksFetchTimeout bounds one read of a JWKS URL.
	jwksFetchTimeout = 5 * time.Second
	// jwksEarlyRefreshEvery rate-limits the early re-read a token with an
	// unknown kid triggers: at most one per this interval.
	jwksEarlyRefreshEvery = 30 * time.Second
	// jwksRetryEvery is how soon a failed re-read is tried again (or the
	// refresh interval when that is shorter).
	jwksRetryEvery = 5 * time.Second
	// minRSABits is the smallest RSA modulus accepted.
	minRSABits = 2048
)

// jwks is a JSON Web Key Set read from a file or an http(s) URL and kept
// fresh without a goroutine of its own: a verification that finds the set
// older than the refresh interval re-reads it first (one caller at a time;
// the others go on with the set in hand meanwhile). A failed re-read keeps
// the last set that loaded, is logged, and is retried jwksRetryEvery later.
// A token whose kid is not in the set triggers at most one early re-read
// per jwksEarlyRefreshEvery.
type jwks struct {
	location string
	client   *http.Client
	refresh  time.Duration
	now      func() time.Time
	log      *slog.Logger
	store    *jwkset.MemoryJWKSet
	keys     keyfunc.Keyfunc

	// reload is held by the one caller re-reading the set.
	reload sync.Mutex
	// mu guards the times below.
	mu        sync.Mutex
	loadedAt  time.Time // the last successful read
	triedAt   time.Time // the last read attempted
	earlyAt   time.Time // the last early read (unknown kid)
	earlyUsed bool
}

// newJWKS reads the set at location (an http(s) URL or a file path) once;
// an unreadable set, or one without a usable key, is an error.
func newJWKS(ctx context.Context, location string, refresh time.Duration, client *http.Client,
	now func() time.Time, log *slog.Logger) (*jwks, error) {
	if refresh <= 0 {
		return nil, errors.New("JWKS refresh interval must be > 0")
	}
	if client == nil {
		client = &http.Client{CheckRedirect: sameSchemeRedirect}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store := jwkset.NewMemoryStorage()
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: store,
		UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
	if err != nil {
		return nil, fmt.Errorf("JWKS key function: %w", err)
	}
	s := &jwks{location: location, client: client, refresh: refresh, now: now, log: log, store: store, keys: kf}
	n, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("JWKS %s holds no usable key (RS256, ES256 or EdDSA, with a kid)", location)
	}
	return s, nil
}

// sameSchemeRedirect refuses a redirect that changes the scheme (an
// https JWKS must not be fetched over http).
func sameSchemeRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("more than 5 redirects")
	}
	if req.URL.Scheme != via[0].URL.Scheme {
		return fmt.Errorf("redirect from %s to %s refused", via[0].URL.Scheme, req.URL.Scheme)
	}
	return nil
}

// isURL reports whether location is an http(s) URL rather than a file.
func isURL(location string) bool {
	return strings.HasPrefix(location, "https://") || strings.HasPrefix(location, "http://")
}

// read returns the JWKS document.
func (s *jwks) read(ctx context.Context) ([]byte, error) {
	if !isURL(s.location) {
		f, err := os.Open(s.location)
		if err != nil {
			return nil, fmt.Errorf("read JWKS file: %w", err)
		}
		defer func() { _ = f.Close() }()
		return readBounded(f)
	}
	if _, err := url.ParseRequestURI(s.location); err != nil {
		return nil, fmt.Errorf("JWKS URL: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, jwksFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.location, nil)
	if err != nil {
		return nil, fmt.Errorf("JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS: HTTP status %d", res.StatusCode)
	}
	return readBounded(res.Body)
}

// readBounded reads r whole, refusing more than maxJWKSBytes.
func readBounded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read JWKS: %w", err)
	}
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("JWKS larger than %d bytes", maxJWKSBytes)
	}
	return data, nil
}

// load reads and parses the set and replaces the keys in store with its
// usable ones: public signing keys (private parts are ignored) of a
// supported type, each with a kid. It returns how many it kept.
func (s *jwks) load(ctx context.Context) (int, error) {
	s.mu.Lock()
	s.triedAt = s.now()
	s.mu.Unlock()
	data, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(data, &set); err != nil {
		return 0, fmt.Errorf("parse JWKS: %w", err)
	}
	keys := make([]jwkset.JWK, 0, len(set.Keys))
	for _, m := range set.Keys {
		if m.KID == "" {
			continue // a token names its key by kid: one without cannot be chosen
		}
		k, err := jwkset.NewJWKFromMarshal(m, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if errors.Is(err, jwkset.ErrUnsupportedKey) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("JWKS key %q: %w", m.KID, err)
		}
		keys = append(keys, k)
	}
	if err := s.store.KeyReplaceAll(ctx, keys); err != nil {
		return 0, fmt.Errorf("store JWKS keys: %w", err)
	}
	s.mu.Lock()
	s.loadedAt = s.now()
	s.mu.Unlock()
	return len(keys), nil
}

// due reports whether the set is older than the refresh interval and no
// attempt failed within jwksRetryEvery.
func (s *jwks) due() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	return now.Sub(s.loadedAt) >= s.refresh && now.Sub(s.triedAt) >= min(s.refresh, jwksRetryEvery)
}

// earlyAllowed takes the early re-read of an unknown kid if the rate
// limit allows one now.
func (s *jwks) earlyAllowed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.earlyUsed && now.Sub(s.earlyAt) < jwksEarlyRefreshEvery {
		return false
	}
	s.earlyUsed, s.earlyAt = true, now
	return true
}

// reread re-reads the set unless another caller is doing so; a failure is
// logged and the keys in hand stay.
func (s *jwks) reread(ctx context.Context, why string) {
	if !s.reload.TryLock() {
		return
	}
	defer s.reload.Unlock()
	ctx = context.WithoutCancel(ctx) // one impatient caller must not spoil the read for everyone
	if n, err := s.load(ctx); err != nil {
		s.log.Warn("JWKS re-read failed; the last keys read stay in use",
			slog.String("jwks", s.location), slog.String("reason", why), slog.String("error", err.Error()))
	} else if n == 0 {
		s.log.Warn("JWKS holds no usable key: every token is refused", slog.String("jwks", s.location))
	}
}

// key returns the public key of kid for alg: re-reading a set that is due
// first, and the set once early when kid is unknown and the rate limit
// allows. The key's type must be alg's: RSA (>= 2048 bits) for RS256,
// ECDSA P-256 for ES256, Ed25519 for EdDSA; a key whose own "alg" is set
// must name alg too.
func (s *jwks) key(ctx context.Context, token *jwt.Token, alg string) (any, error) {
	if s.due() {
		s.reread(ctx, "refresh interval")
	}
	key, err := s.keys.KeyfuncCtx(ctx)(token)
	if err != nil && errors.Is(err, jwkset.ErrKeyNotFound) && s.earlyAllowed() {
		s.reread(ctx, "unknown kid")
		key, err = s.keys.KeyfuncCtx(ctx)(token)
	}
	if err != nil {
		if errors.Is(err, jwkset.ErrKeyNotFound) {
			return nil, errors.New("kid is not in the key set")
		}
		return nil, fmt.Errorf("key: %w", err)
	}
	if err := keyFits(key, alg); err != nil {
		return nil, err
	}
	return key, nil
}

// keyFits checks that key is of the type alg signs with.
func keyFits(key any, alg string) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if alg != AlgRS256 {
			return fmt.Errorf("an RSA key does not verify %s", alg)
		}
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA key of %d bits is shorter than %d", k.N.BitLen(), minRSABits)
		}
	case *ecdsa.PublicKey:
		if alg != AlgES256 || k.Curve != elliptic.P256() {
			return fmt.Errorf("an ECDSA %s key does not verify %s", k.Curve.Params().Name, alg)
		}
	case ed25519.PublicKey:
		if alg != AlgEdDSA {
			return fmt.Errorf("an Ed25519 key does not verify %s", alg)
		}
	default:
		return fmt.Errorf("a %T key does not verify %s", key, alg)
	}
	return nil
}
