package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestPublishBatchesConcurrentSends: with SendBatch, concurrent publishes
// of one topic share SendMessage calls, every message is confirmed and
// arrives once, on its own, with its tag, keys, properties and the broker
// id its receipt named; messages with a delivery time still go one by one.
func TestPublishBatchesConcurrentSends(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	reg := prometheus.NewRegistry()
	cfg := relaxed(env.Config)
	cfg.SendBatch = 32
	pub := startPublisher(t, cfg, reg)
	topic := env.Topic(ports.TopicOrderCreate)

	const n = 300
	sent := publishConcurrently(t, pub, "evt_", n, 50)
	calls := histogramCount(t, reg, "mq_send_batch_messages")
	if calls == 0 || calls >= n {
		t.Fatalf("%d SendMessage calls for %d concurrent messages: no batching", calls, n)
	}
	t.Logf("%d messages in %d calls", n, calls)

	rec := newRecorder()
	startRunner(t, env.Config, fastRunner(env.Group(rocketmq.GroupOrderCreate), map[string]string{topic: "*"}, 4),
		eachMessage(rec, func(ports.Delivery) ports.Decision { return ports.Acked("created") }), reg)
	got := rec.waitFor(t, 60*time.Second, "every message", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) == n })
	for id, ds := range byMessageID(got) {
		d := ds[0]
		r := sent[id]
		switch {
		case d.Tag != "CREATE_ORDER" || !slices.Equal(d.Keys, []string{"rsv_" + id}) || d.Properties["reservation_id"] != "rsv_"+id:
			t.Errorf("delivery %s: tag %q keys %v properties %v", id, d.Tag, d.Keys, d.Properties)
		case d.BrokerMessageID == "" || d.BrokerMessageID != r.BrokerMessageID:
			t.Errorf("delivery %s: broker id %q, receipt %q", id, d.BrokerMessageID, r.BrokerMessageID)
		}
	}
	before := histogramCount(t, reg, "mq_send_batch_messages")
	mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: "evt_delay", Body: []byte(`{}`),
		DeliverAt: time.Now().Add(time.Hour)})
	if histogramCount(t, reg, "mq_send_batch_messages") != before {
		t.Fatal("a message with a delivery time went through the batch sender")
	}
}

// TestPublishBatchBlackholedIsUnknown: every message of a batch whose call
// times out is UNKNOWN, never a definite failure.
func TestPublishBatchBlackholedIsUnknown(t *testing.T) {
	env := mqtest.NewEnv(t)
	proxy, err := faultproxy.New(env.Config.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	env.RedirectThrough(proxy.Addr())
	cfg := env.Config
	cfg.SendTimeout, cfg.SendBatch = 200*time.Millisecond, 16
	pub := startPublisher(t, cfg, prometheus.NewRegistry())
	send := func(id string) error {
		_, err := pub.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Body: []byte("{}")})
		return err
	}
	if err := retryUntilOK(func() error { return send("evt_before") }); err != nil {
		t.Fatalf("send through the proxy in pass mode: %v", err)
	}
	proxy.SetBlackhole()
	errs := make([]error, 20)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = send(fmt.Sprintf("evt_blackholed_%d", i)) }()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ports.ErrSendUnknown) || errors.Is(err, ports.ErrSendRejected) {
			t.Fatalf("blackholed publish %d: %v, want ErrSendUnknown", i, err)
		}
	}
	proxy.SetPass()
	if err := retryUntilOK(func() error { return send("evt_after") }); err != nil {
		t.Fatalf("send after the partition healed: %v", err)
	}
}

// publishConcurrently publishes n order-create messages (ids prefix0 ..
// prefix<n-1>, keys and a reservation_id property "rsv_<id>") from
// senders goroutines at once, each confirmed, and returns the receipts by
// message id.
func publishConcurrently(t *testing.T, pub *rocketmq.Publisher, prefix string, n, senders int) map[string]ports.SendReceipt {
	t.Helper()
	var mu sync.Mutex
	sent := map[string]ports.SendReceipt{}
	var wg sync.WaitGroup
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += senders {
				id := fmt.Sprintf("%s%d", prefix, i)
				r := mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: "CREATE_ORDER",
					Keys: []string{"rsv_" + id}, Body: []byte(`{}`), Properties: map[string]string{"reservation_id": "rsv_" + id}})
				mu.Lock()
				sent[id] = r
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return sent
}

// histogramCount is the sample count of histogram name in reg.
func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	return 0
}

// TestPublishBatchesInPlainText: with Plaintext the adapter's own
// connection (batched sends, batched acks) speaks gRPC without TLS to the
// proxy's one port: concurrent sends are confirmed, every message arrives
// and every acknowledgement succeeds.
func TestPublishBatchesInPlainText(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	reg := prometheus.NewRegistry()
	cfg := relaxed(env.Config)
	cfg.SendBatch, cfg.Plaintext = 32, true
	pub := startPublisher(t, cfg, reg)
	topic := env.Topic(ports.TopicOrderCreate)

	const n = 60
	publishConcurrently(t, pub, "evt_plain_", n, 20)
	if calls := histogramCount(t, reg, "mq_send_batch_messages"); calls == 0 {
		t.Fatal("no SendMessage call went through the adapter's connection")
	}
	rcfg := env.Config
	rcfg.Plaintext = true
	rec := newRecorder()
	startRunner(t, rcfg, fastRunner(env.Group(rocketmq.GroupOrderCreate), map[string]string{topic: "*"}, 4),
		eachMessage(rec, func(ports.Delivery) ports.Decision { return ports.Acked("created") }), reg)
	rec.waitFor(t, 60*time.Second, "every message", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) == n })
	if failed := metricValue(t, reg, "mq_ack_failure_total", map[string]string{"group": env.Group(rocketmq.GroupOrderCreate)}); failed != 0 {
		t.Fatalf("%v acknowledgements failed in plain text", failed)
	}
}
