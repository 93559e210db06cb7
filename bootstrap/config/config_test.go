package config

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestDefaultsFitTheLocalStack(t *testing.T) {
	c, err := Load(env(localStack))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:7080" || c.Redis.Addr != "127.0.0.1:56379" || c.Broker.Name != "rocketmq" || c.Broker.Settings.Target() != "127.0.0.1:8081" {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if got := c.ConsumerConcurrency(); got != 22 {
		t.Fatalf("consumer concurrency = %d, want 22 (70%% of 32)", got)
	}
}

func TestInvalidValuesAreAllReported(t *testing.T) {
	_, err := Load(env(map[string]string{
		"SECKILL_SEND_TIMEOUT":   "fast",
		"SECKILL_PG_MAX_CONNS":   "1",
		"SECKILL_AUTH_SECRET":    "short",
		"SECKILL_CONSUMER_BATCH": "64",
	}))
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{"SECKILL_SEND_TIMEOUT", "SECKILL_PG_MAX_CONNS", "SECKILL_AUTH_SECRET", "SECKILL_CONSUMER_BATCH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestSecretsAreMaskedInLogs(t *testing.T) {
	c, err := Load(env(map[string]string{
		"SECKILL_PG_DSN":         "postgres://app@db.example:5432/seckill?sslmode=disable&password=hunter2hunter2",
		"SECKILL_AUTH_SECRET":    "super-secret-token-key-123",
		"SECKILL_REDIS_PASSWORD": "redis-pass-456",
		"SECKILL_SEND_TIMEOUT":   "40ms",
		"SECKILL_OPS_TOKEN":      "ops-token-abcdefghijklmnop",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Broker.Neutral.SendTimeout != 40*time.Millisecond {
		t.Fatalf("send timeout = %v", c.Broker.Neutral.SendTimeout)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c, "secret", c.AuthSecret)
	out := buf.String()
	for _, leaked := range []string{"hunter2", "super-secret", "redis-pass", "ops-token"} {
		if strings.Contains(out, leaked) {
			t.Fatalf("log leaks %q: %s", leaked, out)
		}
	}
	if !strings.Contains(out, "db.example") {
		t.Fatalf("log lost the DSN host: %s", out)
	}
}

// TestDSNPasswordsAreMaskedWherever checks every place a DSN can carry a
// password: the URL's user part, a password query parameter (any case),
// and a key=value DSN, which is hidden whole.
func TestDSNPasswordsAreMaskedWherever(t *testing.T) {
	for _, dsn := range []string{
		"postgres://app:hunter2@db:5432/s",
		"postgres://app@db:5432/s?password=hunter2",
		"postgresql://app@db/s?PassWord=hunter2&sslmode=require",
		"postgres://app@db/s?sslpassword=hunter2",
		"host=db user=app password=hunter2 dbname=s",
	} {
		if got := maskDSN(dsn); strings.Contains(got, "hunter2") {
			t.Errorf("maskDSN(%q) = %q leaks the password", dsn, got)
		}
	}
}

// localStack is the environment of the local development stack: what
// deploy/local/stack.sh up exports that the configuration reads.
var localStack = map[string]string{"SECKILL_LOCAL_STACK": "true"}

// with returns base with kv added.
func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestDevelopmentSecretOnlyOnTheLocalStack refuses the public development
// secret unless SECKILL_LOCAL_STACK=true, whatever the address (a loopback
// SECKILL_HTTP_ADDR no longer implies the local stack), and accepts it on
// the local stack on any address; a secret of one's own is accepted
// everywhere.
func TestDevelopmentSecretOnlyOnTheLocalStack(t *testing.T) {
	const ops = "ops-token-0123456789abcdef"
	for _, addr := range []string{"127.0.0.1:7080", "localhost:7080", "[::1]:7080", ":7080", "10.1.2.3:7080"} {
		_, err := Load(env(map[string]string{"SECKILL_HTTP_ADDR": addr, "SECKILL_OPS_TOKEN": ops}))
		if err == nil || !strings.Contains(err.Error(), "SECKILL_AUTH_SECRET") || !strings.Contains(err.Error(), "SECKILL_LOCAL_STACK") {
			t.Errorf("dev secret on %s without the local stack: err = %v, want a refusal naming SECKILL_AUTH_SECRET and SECKILL_LOCAL_STACK", addr, err)
		}
		for _, v := range []string{"false", "0"} {
			if _, err := Load(env(map[string]string{"SECKILL_HTTP_ADDR": addr, "SECKILL_OPS_TOKEN": ops, "SECKILL_LOCAL_STACK": v})); err == nil {
				t.Errorf("dev secret on %s with SECKILL_LOCAL_STACK=%s accepted", addr, v)
			}
		}
		if c, err := Load(env(with(localStack, "SECKILL_HTTP_ADDR", addr))); err != nil || !c.LocalStack {
			t.Errorf("dev secret on %s on the local stack: %v (local stack %v)", addr, err, c.LocalStack)
		}
		if _, err := Load(env(map[string]string{"SECKILL_HTTP_ADDR": addr, "SECKILL_AUTH_SECRET": "a-real-secret-0123456789",
			"SECKILL_OPS_TOKEN": ops})); err != nil {
			t.Errorf("own secret on %s: %v", addr, err)
		}
	}
	// In JWKS mode the secret verifies nothing: its default is no risk.
	if _, err := Load(env(map[string]string{"SECKILL_AUTH_JWKS": "https://idp.example/jwks.json", "SECKILL_OPS_TOKEN": ops})); err != nil {
		t.Errorf("JWKS mode with the default secret: %v", err)
	}
}

// TestOpsTokenOutsideTheLocalStack: outside the local stack an empty
// SECKILL_OPS_TOKEN is refused with the way out; a token (at least 16
// bytes) is accepted, masked in the listing, and SECKILL_OPS_HOSTS is read
// as a list of host names.
func TestOpsTokenOutsideTheLocalStack(t *testing.T) {
	own := map[string]string{"SECKILL_AUTH_SECRET": "a-real-secret-0123456789"}
	_, err := Load(env(own))
	if err == nil || !strings.Contains(err.Error(), "set SECKILL_OPS_TOKEN or run on the local stack") {
		t.Fatalf("no ops token outside the local stack: %v", err)
	}
	if _, err := Load(env(with(own, "SECKILL_OPS_TOKEN", "short"))); err == nil || !strings.Contains(err.Error(), "SECKILL_OPS_TOKEN") {
		t.Errorf("short ops token: %v", err)
	}
	c, err := Load(env(with(own, "SECKILL_OPS_TOKEN", "ops-token-0123456789abcdef", "SECKILL_OPS_HOSTS", " ops.internal , metrics.example.com,,")))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.OpsToken) != "ops-token-0123456789abcdef" || strings.Join(c.OpsHosts, "|") != "ops.internal|metrics.example.com" {
		t.Fatalf("ops token %q hosts %q", string(c.OpsToken), c.OpsHosts)
	}
	if c, err := Load(env(localStack)); err != nil || c.OpsToken != "" || c.OpsHosts != nil {
		t.Fatalf("local stack without an ops token: %v %+v", err, c)
	}
	for _, bad := range []string{"ops.internal:7081", "ops internal", "*.example.com"} {
		if _, err := Load(env(with(localStack, "SECKILL_OPS_HOSTS", bad))); err == nil || !strings.Contains(err.Error(), "SECKILL_OPS_HOSTS") {
			t.Errorf("SECKILL_OPS_HOSTS=%q: %v", bad, err)
		}
	}
	settings, _ := Settings(env(with(own, "SECKILL_OPS_TOKEN", "ops-token-0123456789abcdef")))
	for _, s := range settings {
		if s.Key == "SECKILL_OPS_TOKEN" && (!s.Secret || s.Value != "****") {
			t.Errorf("ops token listed as %+v", s)
		}
	}
}

// TestAuthJWKSSettings: the JWKS location is an https URL, an http URL of
// a loopback host or a file path; refresh and lifetime are bounded; the
// defaults are 5m and 24h.
func TestAuthJWKSSettings(t *testing.T) {
	c, err := Load(env(localStack))
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.JWKS != "" || c.Auth.JWKSRefresh != 5*time.Minute || c.Auth.MaxTokenLifetime != 24*time.Hour || c.Auth.Issuer != "" || c.Auth.Audience != "" {
		t.Fatalf("auth defaults %+v", c.Auth)
	}
	for v, ok := range map[string]bool{
		"https://idp.example/.well-known/jwks.json": true, "http://127.0.0.1:8080/jwks": true, "http://localhost/jwks": true,
		"http://[::1]:9/jwks": true, "/etc/seckill/jwks.json": true, "jwks.json": true,
		"http://idp.example/jwks": false, "https://": false, "ftp://idp.example/jwks": false, "file:///etc/jwks.json": false,
	} {
		_, err := Load(env(with(localStack, "SECKILL_AUTH_JWKS", v)))
		if (err == nil) != ok {
			t.Errorf("SECKILL_AUTH_JWKS=%q: err %v, want ok=%v", v, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "SECKILL_AUTH_JWKS") {
			t.Errorf("SECKILL_AUTH_JWKS=%q: error %v does not name the variable", v, err)
		}
	}
	for k, vals := range map[string]map[string]bool{
		"SECKILL_AUTH_JWKS_REFRESH":       {"1s": true, "24h": true, "500ms": false, "25h": false, "0s": false},
		"SECKILL_AUTH_MAX_TOKEN_LIFETIME": {"1m": true, "720h": true, "30s": false, "721h": false},
	} {
		for v, ok := range vals {
			_, err := Load(env(with(localStack, k, v)))
			if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), k)) {
				t.Errorf("%s=%s: err %v, want ok=%v", k, v, err, ok)
			}
		}
	}
	c, err = Load(env(with(localStack, "SECKILL_AUTH_ISSUER", "https://idp.example", "SECKILL_AUTH_AUDIENCE", "seckill")))
	if err != nil || c.Auth.Issuer != "https://idp.example" || c.Auth.Audience != "seckill" {
		t.Fatalf("issuer/audience: %v %+v", err, c.Auth)
	}
}

// TestConsumerLimiterSettings: the consumer limiter is fixed by default
// with its floor and tick defaults, adaptive when asked, and every value
// out of range is refused naming its variable.
func TestConsumerLimiterSettings(t *testing.T) {
	c, err := Load(env(localStack))
	if err != nil {
		t.Fatal(err)
	}
	if c.Workers.ConsumerLimiter != LimiterFixed || c.AdaptiveConsumers() {
		t.Fatalf("default limiter %q (adaptive %v), want fixed", c.Workers.ConsumerLimiter, c.AdaptiveConsumers())
	}
	if c.Workers.ConsumerLimitFloor != 2 || c.Workers.ConsumerLimitTick != time.Second {
		t.Fatalf("defaults floor %d tick %v, want 2 and 1s", c.Workers.ConsumerLimitFloor, c.Workers.ConsumerLimitTick)
	}
	// The fixed limiter ignores the floor: a pool whose order-create
	// concurrency is below the default floor (2) is valid.
	if _, err := Load(env(with(localStack, "SECKILL_PG_MAX_CONNS", "2"))); err != nil {
		t.Fatalf("fixed limiter, order-create concurrency 1: %v", err)
	}
	c, err = Load(env(with(localStack, "SECKILL_CONSUMER_LIMITER", "adaptive",
		"SECKILL_CONSUMER_LIMIT_FLOOR", "4", "SECKILL_CONSUMER_LIMIT_TICK", "250ms")))
	if err != nil {
		t.Fatal(err)
	}
	if !c.AdaptiveConsumers() || c.Workers.ConsumerLimitFloor != 4 || c.Workers.ConsumerLimitTick != 250*time.Millisecond ||
		c.Workers.ConsumerGlobalBudget != 0 {
		t.Fatalf("adaptive settings read as %+v", c.Workers)
	}
	// One budget across instances: only under the adaptive limiter.
	c, err = Load(env(with(localStack, "SECKILL_CONSUMER_LIMITER", "adaptive", "SECKILL_CONSUMER_GLOBAL_BUDGET", "44")))
	if err != nil || c.Workers.ConsumerGlobalBudget != 44 {
		t.Fatalf("global budget 44 read as %d, %v", c.Workers.ConsumerGlobalBudget, err)
	}
	if _, err := Load(env(with(localStack, "SECKILL_CONSUMER_GLOBAL_BUDGET", "44"))); err == nil ||
		!strings.Contains(err.Error(), "SECKILL_CONSUMER_GLOBAL_BUDGET needs SECKILL_CONSUMER_LIMITER=adaptive") {
		t.Errorf("global budget with the fixed limiter: error %v", err)
	}
	for _, tc := range []struct{ key, value, want string }{
		{"SECKILL_CONSUMER_LIMITER", "gradient", "SECKILL_CONSUMER_LIMITER must be fixed or adaptive"},
		{"SECKILL_CONSUMER_LIMIT_FLOOR", "0", "SECKILL_CONSUMER_LIMIT_FLOOR must be 1..22"},
		{"SECKILL_CONSUMER_LIMIT_FLOOR", "23", "SECKILL_CONSUMER_LIMIT_FLOOR must be 1..22"},
		{"SECKILL_CONSUMER_LIMIT_FLOOR", "two", "SECKILL_CONSUMER_LIMIT_FLOOR: \"two\" is not an integer"},
		{"SECKILL_CONSUMER_LIMIT_TICK", "10ms", "SECKILL_CONSUMER_LIMIT_TICK must be 100ms..1m"},
		{"SECKILL_CONSUMER_LIMIT_TICK", "2m", "SECKILL_CONSUMER_LIMIT_TICK must be 100ms..1m"},
		{"SECKILL_CONSUMER_GLOBAL_BUDGET", "-1", "SECKILL_CONSUMER_GLOBAL_BUDGET must be >= 0"},
	} {
		_, err := Load(env(with(localStack, "SECKILL_CONSUMER_LIMITER", "adaptive", tc.key, tc.value)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: error %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}

// TestRedisRetentionSettings: the request claim, the reservation record
// and the order view have their lifetimes, and a claim may never outlive
// its reservation.
func TestRedisRetentionSettings(t *testing.T) {
	c, err := Load(env(localStack))
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.RequestClaimTTL != 24*time.Hour || c.Redis.ReservationRetention != 24*time.Hour || c.Redis.OrderViewTTL != 24*time.Hour {
		t.Fatalf("defaults: claim %s, retention %s, view %s", c.Redis.RequestClaimTTL, c.Redis.ReservationRetention, c.Redis.OrderViewTTL)
	}
	for _, ok := range [][]string{{"SECKILL_RESERVATION_RETENTION", "0"},
		{"SECKILL_REQUEST_CLAIM_TTL", "5m", "SECKILL_RESERVATION_RETENTION", "5m"}} {
		if _, err := Load(env(with(localStack, ok...))); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"SECKILL_RESERVATION_RETENTION", "1h"}, "SECKILL_RESERVATION_RETENTION must be 0 or >= SECKILL_REQUEST_CLAIM_TTL"},
		{[]string{"SECKILL_REQUEST_CLAIM_TTL", "0s"}, "SECKILL_REQUEST_CLAIM_TTL must be > 0"},
		{[]string{"SECKILL_ORDER_VIEW_TTL", "-1s"}, "SECKILL_ORDER_VIEW_TTL must be >= 0"},
	} {
		if _, err := Load(env(with(localStack, tc.kv...))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.kv, err, tc.want)
		}
	}
}

// TestBrokerSettingsComeFromTheChosenPlug: SECKILL_BROKER chooses a plug of
// the registry, whose own settings are the ones kept and validated; every
// plug's variables are listed whichever is chosen, and a name no plug has
// is refused with the names there are.
func TestBrokerSettingsComeFromTheChosenPlug(t *testing.T) {
	base := map[string]string{"SECKILL_RABBITMQ_FIFO_SHARDS": "0", "SECKILL_ROCKETMQ_ENDPOINT": "10.0.0.9:8081"}
	for k, v := range localStack {
		base[k] = v
	}
	c, err := Load(env(base))
	if err != nil {
		t.Fatalf("rocketmq is chosen, so the rabbitmq shards are not validated: %v", err)
	}
	if c.Broker.Name != "rocketmq" || c.Broker.Settings.Target() != "10.0.0.9:8081" {
		t.Fatalf("broker = %q at %q, want rocketmq at 10.0.0.9:8081", c.Broker.Name, c.Broker.Settings.Target())
	}
	_, err = Load(env(with(base, "SECKILL_BROKER", "rabbitmq")))
	if err == nil || !strings.Contains(err.Error(), "SECKILL_RABBITMQ_FIFO_SHARDS") {
		t.Fatalf("rabbitmq chosen with 0 shards: err = %v, want one naming SECKILL_RABBITMQ_FIFO_SHARDS", err)
	}
	_, err = Load(env(with(base, "SECKILL_BROKER", "carrier-pigeon")))
	if err == nil || !strings.Contains(err.Error(), "rocketmq, rabbitmq") || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Fatalf("unknown broker: err = %v, want the name and the plugs' names", err)
	}
	settings, _ := Settings(env(base))
	for _, key := range []string{"SECKILL_ROCKETMQ_ENDPOINT", "SECKILL_INVISIBLE_DURATION", "SECKILL_RABBITMQ_URL", "SECKILL_RABBITMQ_FIFO_SHARDS"} {
		if !slices.ContainsFunc(settings, func(s Setting) bool { return s.Key == key }) {
			t.Errorf("%s is not listed", key)
		}
	}
}
