package devstack

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// TestKafkaClusterMode brings up the Kafka plug's cluster mode in a
// private state dir: three KRaft nodes, exported as three seeds with three
// replicas per topic. On a namespace of the cluster a send is confirmed,
// one node is stopped (by pid), a second send is confirmed by the two
// left, and a consumer receives both. A second Up restarts the stopped
// node and adopts the others.
func TestKafkaClusterMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := privateConfig(t)
	s, err := PluggedClusterStack(cfg, testLogger(t), kafka.PlugName)
	if err != nil {
		t.Fatal(err)
	}
	nodes := s.Components()
	if len(nodes) != 3 {
		t.Fatalf("%d cluster components, want 3", len(nodes))
	}
	for _, n := range nodes {
		stopOnCleanup(t, n)
	}
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range s.ClusterExports() {
		env[e.Name] = e.Value
	}
	seeds := strings.Split(env["SECKILL_KAFKA_BROKERS"], ",")
	if len(seeds) != 3 || env["SECKILL_KAFKA_REPLICATION"] != "3" {
		t.Fatalf("cluster exports %v: want three seeds and three replicas", env)
	}
	settings := kafka.Settings{Brokers: seeds, Partitions: 1, Replication: 3, RetryDelay: 300 * time.Millisecond}
	ns, err := kafka.Plug{}.NewNamespace(ctx, settings, brokerplug.NamespaceOptions{Prefix: "TCLUSTER_"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ns.Close(context.Background()) }()
	b, err := kafka.Plug{}.Open(ns.Settings(), brokerplug.Deps{Neutral: brokerplug.Neutral{SendTimeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(ctx, t, b, "cluster-before")
	if err := nodes[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(ctx, t, b, "cluster-after")
	got := consumeIDs(ctx, t, b, 2)
	if !got["cluster-before"] || !got["cluster-after"] {
		t.Fatalf("consumed %v, want both messages", got)
	}
	pid0 := nodes[0].PID()
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes[1].PID() == 0 || nodes[0].PID() != pid0 {
		t.Fatalf("second Up: stopped node pid %d, first node pid %d then %d: want the stopped one restarted, the others adopted",
			nodes[1].PID(), pid0, nodes[0].PID())
	}
}

// publishConfirmed publishes one order-event message with id until the
// broker confirms it (at most 10 tries: a send may end UNKNOWN while the
// client learns where a partition's leader moved).
func publishConfirmed(ctx context.Context, t *testing.T, b brokerplug.Broker, id string) {
	t.Helper()
	var err error
	for range 10 {
		if _, err = b.Publish(ctx, ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: id, Tag: "ORDER_CREATED",
			Body: []byte(id)}); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("publish %s: %v", id, err)
}

// consumeIDs runs one order-event group until it has acknowledged n
// distinct message ids, bounded by ctx, and returns them.
func consumeIDs(ctx context.Context, t *testing.T, b brokerplug.Broker, n int) map[string]bool {
	t.Helper()
	var (
		mu     sync.Mutex
		seen   = map[string]bool{}
		done   = make(chan struct{})
		closed bool
	)
	h := handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		mu.Lock()
		defer mu.Unlock()
		out := make([]ports.Decision, len(ds))
		for i, d := range ds {
			seen[d.Properties[message.PropMessageID]] = true
			out[i] = ports.Acked("test")
		}
		if len(seen) == n && !closed {
			closed = true
			close(done)
		}
		return out
	})
	sub := ports.Subscriptions()[0]
	for _, s := range ports.Subscriptions() {
		if s.Topic == ports.TopicOrderEvent {
			sub = s
		}
	}
	loop, err := b.Consumer(sub, h, brokerplug.ConsumerOptions{Batch: 8, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- loop(cctx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Errorf("consumer loop: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return seen
}

type handlerFunc func(ctx context.Context, ds []ports.Delivery) []ports.Decision

func (f handlerFunc) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	return f(ctx, ds)
}
