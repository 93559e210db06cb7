package config

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestDefaultsFitTheLocalStack(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:7080" || c.Redis.Addr != "127.0.0.1:56379" || c.RocketMQ.Endpoint != "127.0.0.1:8081" {
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
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RocketMQ.SendTimeout != 40*time.Millisecond {
		t.Fatalf("send timeout = %v", c.RocketMQ.SendTimeout)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c, "secret", c.AuthSecret)
	out := buf.String()
	for _, leaked := range []string{"hunter2", "super-secret", "redis-pass"} {
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

// TestDevelopmentSecretOnlyOnLoopback refuses the public development
// secret unless the API listens on a loopback address.
func TestDevelopmentSecretOnlyOnLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7080": true, "localhost:7080": true, "[::1]:7080": true, "127.0.0.2:1": true,
		":7080": false, "0.0.0.0:7080": false, "10.1.2.3:7080": false, "[::]:7080": false,
	} {
		_, err := Load(env(map[string]string{"SECKILL_HTTP_ADDR": addr}))
		if (err == nil) != ok {
			t.Errorf("dev secret on %s: err = %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "SECKILL_AUTH_SECRET") {
			t.Errorf("error %q does not name SECKILL_AUTH_SECRET", err)
		}
		if _, err := Load(env(map[string]string{"SECKILL_HTTP_ADDR": addr, "SECKILL_AUTH_SECRET": "a-real-secret-0123456789"})); err != nil {
			t.Errorf("own secret on %s: %v", addr, err)
		}
	}
}
