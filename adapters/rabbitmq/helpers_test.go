package rabbitmq_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
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

// startPublisher starts a publisher on env, closed when the test ends.
func startPublisher(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Publisher {
	t.Helper()
	p, err := rabbitmq.NewPublisher(cfg, testLogger(t), nil)
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

// startRunner runs r until stop or the end of the test; stop cancels it
// and waits for Run to return (idempotent).
func startRunner(t *testing.T, r *rabbitmq.Runner) (stop func()) {
	t.Helper()
	return contracttest.RunLoop(t, 60*time.Second, r.Run)
}

// runGroup declares sub in env and runs a runner of it with h.
func runGroup(t *testing.T, env *rabbittest.Env, sub ports.Subscription, concurrency, batch int, h ports.BatchHandler) rabbitmq.GroupSpec {
	t.Helper()
	g := env.AddGroup(sub)
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: concurrency,
		BatchSize: batch}, h, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, r)
	return g
}

// handlerFunc adapts a function to ports.BatchHandler.
type handlerFunc func(ctx context.Context, ds []ports.Delivery) []ports.Decision

func (f handlerFunc) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}

// record is one delivery and when it was handled.
type record struct {
	d  ports.Delivery
	at time.Time
}

// recorder collects deliveries.
type recorder struct {
	mu     sync.Mutex
	all    []record
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

// handler records every delivery and decides it with decide.
func (r *recorder) handler(decide func(ports.Delivery) ports.Decision) ports.BatchHandler {
	return handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		now := time.Now()
		r.mu.Lock()
		for i, d := range ds {
			r.all = append(r.all, record{d, now})
			out[i] = decide(d)
		}
		r.mu.Unlock()
		select {
		case r.notify <- struct{}{}:
		default:
		}
		return out
	})
}

func (r *recorder) snapshot() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), r.all...)
}

// waitFor waits until cond holds on the records, failing the test after
// within.
func (r *recorder) waitFor(t *testing.T, within time.Duration, what string, cond func([]record) bool) []record {
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
		case <-time.After(50 * time.Millisecond):
		case <-deadline.C:
			t.Fatalf("no %s within %v; %d deliveries", what, within, len(got))
		}
	}
}

// of returns the records of message id.
func of(rs []record, id string) []record {
	var out []record
	for _, r := range rs {
		if r.d.Properties["message_id"] == id {
			out = append(out, r)
		}
	}
	return out
}

// brokerAddr returns the host:port of an AMQP URL.
func brokerAddr(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// viaProxy returns the AMQP URL raw with its host:port replaced by addr.
func viaProxy(t *testing.T, raw, addr string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}
