package rocketmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/ports"
)

// testLogger logs to the test's output at the level of
// SECKILL_TEST_LOG_LEVEL (default warn).
func testLogger(t *testing.T) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("SECKILL_TEST_LOG_LEVEL"))); err != nil {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
}

// startPublisher starts a publisher on cfg, closed when the test ends.
func startPublisher(t *testing.T, cfg rocketmq.Config, reg prometheus.Registerer) *rocketmq.Publisher {
	t.Helper()
	p, err := rocketmq.NewPublisher(cfg, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close publisher: %v", err)
		}
	})
	return p
}

// mustPublish publishes msg with a generous deadline (the tests check
// behaviour, not the send latency).
func mustPublish(t *testing.T, p *rocketmq.Publisher, msg ports.OutboundMessage) ports.SendReceipt {
	t.Helper()
	r, err := p.Publish(context.Background(), msg)
	if err != nil {
		t.Fatalf("publish %s: %v", msg.MessageID, err)
	}
	return r
}

// relaxed returns cfg with a send timeout generous enough for a loaded
// test machine.
func relaxed(cfg rocketmq.Config) rocketmq.Config {
	cfg.SendTimeout = 5 * time.Second
	return cfg
}

// handlerFunc adapts a function to ports.BatchHandler.
type handlerFunc func(ctx context.Context, ds []ports.Delivery) []ports.Decision

func (f handlerFunc) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}

// eachMessage builds a handler that decides every delivery with decide and
// records it.
func eachMessage(rec *recorder, decide func(ports.Delivery) ports.Decision) ports.BatchHandler {
	return handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		for i, d := range ds {
			rec.add(d)
			out[i] = decide(d)
		}
		return out
	})
}

// recorder collects deliveries for assertions.
type recorder struct {
	mu     sync.Mutex
	all    []ports.Delivery
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) add(d ports.Delivery) {
	r.mu.Lock()
	r.all = append(r.all, d)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []ports.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ports.Delivery(nil), r.all...)
}

// waitFor waits until cond holds on the recorded deliveries or fails the
// test after within.
func (r *recorder) waitFor(t *testing.T, within time.Duration, what string, cond func([]ports.Delivery) bool) []ports.Delivery {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		got := r.snapshot()
		if cond(got) {
			return got
		}
		select {
		case <-r.notify:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s; got %d deliveries: %s", within, what, len(got), describe(got))
		}
	}
}

// byMessageID counts deliveries per message_id property.
func byMessageID(ds []ports.Delivery) map[string][]ports.Delivery {
	m := map[string][]ports.Delivery{}
	for _, d := range ds {
		id := d.Properties["message_id"]
		m[id] = append(m[id], d)
	}
	return m
}

func describe(ds []ports.Delivery) string {
	s := ""
	for i, d := range ds {
		if i == 20 {
			return s + " ..."
		}
		s += fmt.Sprintf(" %s#%d", d.Properties["message_id"], d.DeliveryAttempt)
	}
	return s
}

// runner is a Runner running in the background until stop or the end of
// the test.
type runner struct {
	cancel context.CancelFunc
	done   chan error
}

// startRunner runs a Runner; stop (or the end of the test) cancels it and
// waits for Run to return.
func startRunner(t *testing.T, cfg rocketmq.Config, rc rocketmq.RunnerConfig, h ports.BatchHandler, reg prometheus.Registerer) *runner {
	t.Helper()
	r, err := rocketmq.NewRunner(cfg, rc, h, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	t.Cleanup(func() { rn.stop(t) })
	return rn
}

// stop cancels the runner and waits for Run to return (idempotent).
func (rn *runner) stop(t *testing.T) {
	t.Helper()
	rn.cancel()
	select {
	case err, ok := <-rn.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(rn.done)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("Run did not return after cancel")
	}
}

// fastRunner is a RunnerConfig for tests: short long-poll and invisible
// duration (the local stack's proxy accepts 1 s).
func fastRunner(group string, subs map[string]string, concurrency int) rocketmq.RunnerConfig {
	return rocketmq.RunnerConfig{
		Group:             group,
		Subscriptions:     subs,
		Concurrency:       concurrency,
		BatchSize:         8,
		InvisibleDuration: 2 * time.Second,
		AwaitDuration:     time.Second,
		DrainTimeout:      5 * time.Second,
	}
}
