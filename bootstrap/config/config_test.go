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
		"SECKILL_PG_DSN":         "postgres://app:hunter2hunter2@db.example:5432/seckill",
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
