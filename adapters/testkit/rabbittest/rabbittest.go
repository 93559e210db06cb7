// Package rabbittest gives tests their own RabbitMQ namespace on one
// broker, so that tests and packages run in parallel and never see each
// other's queues.
//
// NewEnv reads SECKILL_RABBITMQ_URL (the test fails, it is not skipped,
// when it is unset), picks a unique prefix ("T<hex>."), declares the
// service's topology under that prefix (rabbitmq.NewTopology: the five
// topic exchanges, the delay tiers, the alternate and dead-letter
// exchanges and the groups asked for) and deletes it all, messages
// included, when the test ends.
package rabbittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/ports"
)

// EnvURL is the environment variable with the broker's AMQP URL
// (amqp://user:pass@127.0.0.1:port/vhost).
const EnvURL = "SECKILL_RABBITMQ_URL"

// URL returns the broker's AMQP URL, failing the test when it is unset.
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		tb.Fatalf("%s is not set: start RabbitMQ (adapters/rabbitmq/README.md) and export its AMQP URL", EnvURL)
	}
	return u
}

// Env is one test's namespace.
type Env struct {
	// Config has the namespace's prefix and a send timeout generous
	// enough for a loaded test machine.
	Config rabbitmq.Config

	t    testing.TB
	conn *amqp.Connection
	mu   sync.Mutex
	topo rabbitmq.Topology
}

// Option changes the namespace's configuration before its topology is
// declared.
type Option func(*rabbitmq.Config)

// WithMaxQueueLength bounds every group queue (rabbitmq.Config.MaxQueueLength).
func WithMaxQueueLength(n int) Option { return func(c *rabbitmq.Config) { c.MaxQueueLength = n } }

// WithShards sets the shard count of ordered groups.
func WithShards(n int) Option { return func(c *rabbitmq.Config) { c.FIFOShards = n } }

// NewEnv declares a new namespace with the groups of subs (none: no
// group; add them with AddGroup) and deletes it when the test ends.
func NewEnv(tb testing.TB, subs []ports.Subscription, opts ...Option) *Env {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	cfg := rabbitmq.Config{URL: URL(tb), Prefix: "T" + hex.EncodeToString(b[:]) + ".", SendTimeout: 5 * time.Second,
		PublishChannels: 2}
	for _, o := range opts {
		o(&cfg)
	}
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		tb.Fatalf("rabbittest: dial %s: %v", EnvURL, err)
	}
	topo, err := rabbitmq.NewTopology(cfg, ports.Subscriptions()...)
	if err != nil {
		tb.Fatal(err)
	}
	topo.Groups = nil
	for _, s := range subs {
		if topo, err = topo.WithGroup(s); err != nil {
			tb.Fatal(err)
		}
	}
	e := &Env{Config: cfg, t: tb, conn: conn, topo: topo}
	ch := e.channel()
	defer func() { _ = ch.Close() }()
	if err := topo.Declare(ch); err != nil {
		tb.Fatalf("rabbittest: declare the namespace: %v", err)
	}
	tb.Cleanup(func() {
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		if err != nil {
			// The connection did not survive the test (a broker restart):
			// a new one deletes the namespace.
			c, derr := amqp.Dial(cfg.URL)
			if derr != nil {
				tb.Errorf("rabbittest: delete the namespace %s: %v", cfg.Prefix, derr)
				return
			}
			defer func() { _ = c.Close() }()
			if ch, err = c.Channel(); err != nil {
				tb.Errorf("rabbittest: delete the namespace %s: %v", cfg.Prefix, err)
				return
			}
		}
		if err := e.Topology().Delete(ch); err != nil {
			tb.Errorf("rabbittest: delete the namespace %s: %v", cfg.Prefix, err)
		}
	})
	return e
}

// channel opens a channel on the env's connection.
func (e *Env) channel() *amqp.Channel {
	e.t.Helper()
	ch, err := e.conn.Channel()
	if err != nil {
		e.t.Fatalf("rabbittest: open channel: %v", err)
	}
	return ch
}

// Topology returns the namespace's topology with every group added so far.
func (e *Env) Topology() rabbitmq.Topology {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.topo
}

// AddGroup declares the group of s in the namespace and returns it.
func (e *Env) AddGroup(s ports.Subscription) rabbitmq.GroupSpec {
	e.t.Helper()
	e.mu.Lock()
	topo, err := e.topo.WithGroup(s)
	if err == nil {
		e.topo = topo
	}
	e.mu.Unlock()
	if err != nil {
		e.t.Fatal(err)
	}
	g, _ := topo.Group(s.Group)
	ch := e.channel()
	defer func() { _ = ch.Close() }()
	if err := topo.DeclareGroup(ch, g); err != nil {
		e.t.Fatalf("rabbittest: declare group %s: %v", s.Group, err)
	}
	return g
}

// QueueDepth returns the number of ready messages in queue.
func (e *Env) QueueDepth(queue string) int {
	e.t.Helper()
	ch := e.channel()
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		e.t.Fatalf("rabbittest: inspect %s: %v", queue, err)
	}
	return q.Messages
}

// Get takes one message from queue (acknowledged), false when it is empty.
func (e *Env) Get(queue string) (amqp.Delivery, bool) {
	e.t.Helper()
	ch := e.channel()
	defer func() { _ = ch.Close() }()
	d, ok, err := ch.Get(queue, true)
	if err != nil {
		e.t.Fatalf("rabbittest: get from %s: %v", queue, err)
	}
	return d, ok
}

// WaitDepth waits until queue holds at least n ready messages, failing
// the test after within.
func (e *Env) WaitDepth(ctx context.Context, queue string, n int, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := e.QueueDepth(queue)
		if got >= n {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.t.Fatalf("rabbittest: %s holds %d messages after %v, want %d", queue, got, within, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
