package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/ports"
)

// brokersEnv returns the broker address the tests use: SECKILL_KAFKA_BROKERS,
// or the dev stack's default.
func brokersEnv() string {
	if v := os.Getenv("SECKILL_KAFKA_BROKERS"); v != "" {
		return v
	}
	return kafka.DefaultBrokers
}

// testSettings returns settings on the test brokers (SECKILL_KAFKA_BROKERS,
// comma-separated: the stack's node, or its cluster mode's three), with
// the replication of SECKILL_KAFKA_REPLICATION (1 when unset), 2
// partitions per topic and a 300 ms retry delay.
func testSettings() kafka.Settings {
	replication := 1
	if n, err := strconv.Atoi(os.Getenv("SECKILL_KAFKA_REPLICATION")); err == nil {
		replication = n
	}
	return kafka.Settings{Brokers: strings.Split(brokersEnv(), ","), Partitions: 2, Replication: replication,
		RetryDelay: 300 * time.Millisecond}
}

// testLogger logs to the test's output at SECKILL_TEST_LOG_LEVEL (warn).
func testLogger(t *testing.T) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("SECKILL_TEST_LOG_LEVEL"))); err != nil {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// uniqPrefix returns a fresh namespace prefix T<hex>_.
func uniqPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "T" + hex.EncodeToString(b[:]) + "_"
}

// env is a namespace with an open, started broker on it.
type env struct {
	ns     brokerplug.Namespace
	broker brokerplug.Broker
}

// newEnv creates a namespace (closed at the end of the test, failing
// clearly when Kafka is not reachable) and opens a broker on it.
func newEnv(t *testing.T, s kafka.Settings, redeliveries int) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := kafka.Plug{}.NewNamespace(ctx, s, brokerplug.NamespaceOptions{Prefix: uniqPrefix(), Redeliveries: redeliveries})
	if err != nil {
		t.Fatalf("kafka namespace on %s (is Kafka running? set SECKILL_KAFKA_BROKERS): %v", s.Target(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ns.Close(ctx); err != nil {
			t.Errorf("close namespace: %v", err)
		}
	})
	b, err := kafka.Plug{}.Open(ns.Settings(), brokerplug.Deps{Neutral: brokerplug.Neutral{SendTimeout: 10 * time.Second}, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &env{ns: ns, broker: b}
}

// run runs loop until the end of the test (stop cancels it and waits).
func run(t *testing.T, loop func(context.Context) error) (stop func()) {
	t.Helper()
	return contracttest.RunLoop(t, 30*time.Second, loop)
}

// consume runs sub's consumer with h.
func (e *env) consume(t *testing.T, sub ports.Subscription, h ports.BatchHandler) {
	t.Helper()
	loop, err := e.broker.Consumer(sub, h, brokerplug.ConsumerOptions{Batch: 8, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	run(t, loop)
}

// handlerFunc adapts a function to ports.BatchHandler.
type handlerFunc func(ctx context.Context, ds []ports.Delivery) []ports.Decision

func (f handlerFunc) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}

// recorder collects deliveries.
type recorder struct {
	mu  sync.Mutex
	all []ports.Delivery
}

// handler records every delivery and decides it with decide.
func (r *recorder) handler(decide func(ports.Delivery) ports.Decision) ports.BatchHandler {
	return handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, d := range ds {
			r.all = append(r.all, d)
			out[i] = decide(d)
		}
		return out
	})
}

// waitFor polls cond on the records until it holds, failing after within.
func (r *recorder) waitFor(t *testing.T, within time.Duration, what string, cond func([]ports.Delivery) bool) []ports.Delivery {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r.mu.Lock()
		got := append([]ports.Delivery(nil), r.all...)
		r.mu.Unlock()
		if cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v; %d deliveries", what, within, len(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
