package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/brokers"
)

// TestConfigSettingsListEveryVariable: every SECKILL_ name that appears in
// config.go is listed by Settings, once, with a meaning, and the listing
// comes from the reader that Load uses (same variables in the same order
// whether or not the environment sets them).
func TestConfigSettingsListEveryVariable(t *testing.T) {
	// The variables are named in config.go and in each broker plug's
	// plug.go (its package's directory found from its import path).
	files := []string{"config.go"}
	for _, p := range brokers.All() {
		pkg := reflect.TypeOf(p).PkgPath()
		files = append(files, filepath.Join("..", "..", strings.TrimPrefix(pkg, "github.com/seckill-dev/seckill/"), "plug.go"))
	}
	var names []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, regexp.MustCompile(`(SECKILL|OTEL)_[A-Z0-9_]+`).FindAllString(string(src), -1)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 40 {
		t.Fatalf("found only %d SECKILL_ names in config.go: %v", len(names), names)
	}
	// The empty environment is no valid configuration outside the local
	// stack (the development secret); the listing is returned anyway.
	settings, err := Settings(env(nil))
	if err == nil || !strings.Contains(err.Error(), "SECKILL_LOCAL_STACK") {
		t.Fatalf("empty environment: %v, want the local-stack refusal", err)
	}
	listed := map[string]Setting{}
	for _, s := range settings {
		if _, dup := listed[s.Key]; dup {
			t.Errorf("%s is listed twice", s.Key)
		}
		listed[s.Key] = s
		if strings.TrimSpace(s.Meaning) == "" {
			t.Errorf("%s has no meaning", s.Key)
		}
		if s.FromEnv || s.Value != s.Default {
			t.Errorf("%s: from env %v, value %q, default %q with an empty environment", s.Key, s.FromEnv, s.Value, s.Default)
		}
	}
	for _, n := range names {
		if _, ok := listed[n]; !ok {
			t.Errorf("%s appears in config.go but is not listed by Settings", n)
		}
	}
	if len(listed) != len(names) {
		t.Errorf("Settings lists %d variables, config.go names %d", len(listed), len(names))
	}
	for key, want := range map[string]string{
		"SECKILL_HTTP_ADDR": "127.0.0.1:7080", "SECKILL_SEND_TIMEOUT": "50ms", "SECKILL_LOG_LEVEL": "info",
		"SECKILL_PG_CONSUMER_BUDGET": "0.7", "SECKILL_ACK_BATCH": "true", "SECKILL_TOPIC_PREFIX": "",
	} {
		if got := listed[key].Default; got != want {
			t.Errorf("%s default %q, want %q", key, got, want)
		}
	}

	// With every variable set, the same variables in the same order, each
	// from the environment.
	all := map[string]string{}
	for _, s := range settings {
		all[s.Key] = "x"
	}
	again, _ := Settings(env(all))
	keys := func(ss []Setting) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Key)
		}
		return out
	}
	if !slices.Equal(keys(again), keys(settings)) {
		t.Fatalf("settings with every variable set %v, unset %v", keys(again), keys(settings))
	}
	for _, s := range again {
		if !s.FromEnv {
			t.Errorf("%s set but not marked from the environment", s.Key)
		}
	}
}

// TestConfigSettingsMaskSecrets: no secret (the token key, the Redis
// password, the broker's secret key, the DSN's password) appears in any
// field of the listing, set or default, while the other values do.
func TestConfigSettingsMaskSecrets(t *testing.T) {
	settings, err := Settings(env(map[string]string{
		"SECKILL_PG_DSN":              "postgres://app:hunter2hunter2@db.example:5432/seckill?sslmode=disable",
		"SECKILL_AUTH_SECRET":         "super-secret-token-key-123",
		"SECKILL_REDIS_PASSWORD":      "redis-pass-456",
		"SECKILL_ROCKETMQ_SECRET_KEY": "mq-secret-789",
		"SECKILL_SEND_TIMEOUT":        "40ms",
		"SECKILL_OPS_TOKEN":           "ops-secret-0123456789",
	}))
	if err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("%+v", settings)
	for _, leaked := range []string{"hunter2", "super-secret", "redis-pass", "mq-secret", "ops-secret", DevAuthSecret, "seckill:seckill@"} {
		if strings.Contains(out, leaked) {
			t.Errorf("listing leaks %q: %s", leaked, out)
		}
	}
	for _, s := range settings {
		switch s.Key {
		case "SECKILL_AUTH_SECRET", "SECKILL_REDIS_PASSWORD", "SECKILL_ROCKETMQ_SECRET_KEY", "SECKILL_OPS_TOKEN":
			if !s.Secret || s.Value != "****" || !s.FromEnv {
				t.Errorf("%s listed as %+v, want a masked secret from the environment", s.Key, s)
			}
		case "SECKILL_PG_DSN":
			if !s.Secret || !strings.Contains(s.Value, "db.example") {
				t.Errorf("DSN listed as %q, want its host with the password masked", s.Value)
			}
		case "SECKILL_SEND_TIMEOUT":
			if s.Value != "40ms" || s.Default != "50ms" || s.Secret {
				t.Errorf("send timeout listed as %+v", s)
			}
		}
	}
}

// TestConfigSettingsOfAnInvalidConfiguration: the listing is returned with
// Load's error, and the invalid value is shown as written.
func TestConfigSettingsOfAnInvalidConfiguration(t *testing.T) {
	lookup := env(map[string]string{"SECKILL_SEND_TIMEOUT": "fast"})
	settings, err := Settings(lookup)
	_, loadErr := Load(lookup)
	if err == nil || loadErr == nil || err.Error() != loadErr.Error() {
		t.Fatalf("Settings error %v, Load error %v: want the same error", err, loadErr)
	}
	i := slices.IndexFunc(settings, func(s Setting) bool { return s.Key == "SECKILL_SEND_TIMEOUT" })
	if i < 0 || settings[i].Value != "fast" {
		t.Fatalf("invalid value not listed as written: %+v", settings)
	}
	if errors.Unwrap(err) == nil {
		t.Fatalf("error %v does not wrap the reasons", err)
	}
}
