package main

import (
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// TestTokenCommandRules: `seckill token` mints with the development
// secret without SECKILL_LOCAL_STACK (minting verifies nothing) but says
// that only the local stack accepts such a token; it refuses a --ttl
// beyond SECKILL_AUTH_MAX_TOKEN_LIFETIME and refuses to mint at all in
// JWKS mode.
func TestTokenCommandRules(t *testing.T) {
	t.Setenv("SECKILL_AUTH_SECRET", "")
	t.Setenv("SECKILL_LOCAL_STACK", "")
	t.Setenv("SECKILL_OPS_TOKEN", "")
	out, errOut, err := execute(t, "token", "--user", "42", "--payment")
	if err != nil {
		t.Fatalf("token with the development secret: %v", err)
	}
	if !strings.Contains(errOut, "SECKILL_LOCAL_STACK=true") {
		t.Errorf("no note about the development secret: %q", errOut)
	}
	id, err := mustAuth(t, config.DevAuthSecret).Verify(strings.TrimSpace(out))
	if err != nil || id.UserID != 42 || !id.Payment || id.Admin {
		t.Fatalf("minted token: %+v, %v", id, err)
	}

	t.Setenv("SECKILL_AUTH_MAX_TOKEN_LIFETIME", "1h")
	if _, _, err := execute(t, "token", "--user", "42", "--ttl", "2h"); err == nil || !strings.Contains(err.Error(), "SECKILL_AUTH_MAX_TOKEN_LIFETIME") {
		t.Errorf("--ttl beyond the maximum lifetime: %v", err)
	}
	t.Setenv("SECKILL_AUTH_JWKS", "https://idp.example/jwks.json")
	if _, _, err := execute(t, "token", "--user", "42", "--ttl", "1h"); err == nil || !strings.Contains(err.Error(), "SECKILL_AUTH_JWKS") {
		t.Errorf("token in JWKS mode: %v", err)
	}
}

func mustAuth(t *testing.T, secret string) *api.Authenticator {
	t.Helper()
	a, err := api.NewAuthenticator([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return a
}
