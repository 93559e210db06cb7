package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// (a) The Go v5 client sends and receives on a NORMAL topic, and a Delivery
// carries what was published.
func TestPublishAndReceiveNormal(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	reg := prometheus.NewRegistry()
	pub := startPublisher(t, relaxed(env.Config), reg)
	topic := env.Topic(ports.TopicOrderCreate)

	before := time.Now().Add(-time.Second)
	sent := map[string]ports.SendReceipt{}
	for i := range 3 {
		id := fmt.Sprintf("evt_%d", i)
		sent[id] = mustPublish(t, pub, ports.OutboundMessage{
			Topic: ports.TopicOrderCreate, MessageID: id, Tag: "CREATE_ORDER",
			Keys: []string{"rsv_" + id}, Body: []byte(`{"n":` + fmt.Sprint(i) + `}`),
			Properties: map[string]string{"reservation_id": "rsv_" + id, "schema_version": "1"},
		})
	}
	if got := metricValue(t, reg, "mq_publish_total", map[string]string{"topic": topic, "outcome": rocketmq.OutcomeConfirmed}); got != 3 {
		t.Errorf("mq_publish_total{CONFIRMED} = %v, want 3", got)
	}

	rec := newRecorder()
	startRunner(t, env.Config, fastRunner(env.Group(rocketmq.GroupOrderCreate), map[string]string{topic: "CREATE_ORDER"}, 2),
		eachMessage(rec, func(ports.Delivery) ports.Decision { return ports.Acked("created") }), reg)
	got := rec.waitFor(t, 30*time.Second, "3 deliveries", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) == 3 })
	for _, d := range got {
		id := d.Properties["message_id"]
		r, ok := sent[id]
		switch {
		case !ok:
			t.Errorf("unexpected delivery %+v", d)
		case d.Topic != topic || d.Tag != "CREATE_ORDER" || !slices.Equal(d.Keys, []string{"rsv_" + id}):
			t.Errorf("delivery %s: topic %q tag %q keys %v", id, d.Topic, d.Tag, d.Keys)
		case d.BrokerMessageID != r.BrokerMessageID || r.BrokerMessageID == "":
			t.Errorf("delivery %s: broker id %q, receipt %q", id, d.BrokerMessageID, r.BrokerMessageID)
		case d.Properties["reservation_id"] != "rsv_"+id || d.Properties["schema_version"] != "1":
			t.Errorf("delivery %s: properties %v", id, d.Properties)
		case d.DeliveryAttempt != 1 || d.BornAt.Before(before) || d.MessageGroup != "":
			t.Errorf("delivery %s: attempt %d born %v group %q", id, d.DeliveryAttempt, d.BornAt, d.MessageGroup)
		case string(d.Body) == "":
			t.Errorf("delivery %s: empty body", id)
		}
	}
}

// (d) A send to a topic that does not exist is a definite failure, and the
// publisher still starts and serves the other topics.
func TestPublishMissingTopicIsRejected(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	ctx := context.Background()
	if err := env.Admin.DeleteTopic(ctx, env.Topic(ports.TopicOrderEvent)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pub := startPublisher(t, relaxed(env.Config), reg)

	_, err := pub.Publish(ctx, ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: "evt_missing", Tag: "ORDER_CREATED", Body: []byte("{}")})
	if !errors.Is(err, ports.ErrSendRejected) || errors.Is(err, ports.ErrSendUnknown) {
		t.Fatalf("publish to a missing topic: %v, want ErrSendRejected", err)
	}
	topic := env.Topic(ports.TopicOrderEvent)
	if got := metricValue(t, reg, "mq_publish_total", map[string]string{"topic": topic, "outcome": rocketmq.OutcomeDefiniteFailure}); got != 1 {
		t.Errorf("mq_publish_total{DEFINITE_FAILURE} = %v, want 1", got)
	}
	mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: "evt_ok", Body: []byte("{}")})
}

// Invalid messages are definite failures (client-side checks and proxy
// validation), never unknown.
func TestPublishInvalidMessagesAreRejected(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	pub := startPublisher(t, relaxed(env.Config), nil)
	cases := map[string]ports.OutboundMessage{
		"empty body":           {Topic: ports.TopicOrderCreate, MessageID: "a"},
		"tag with |":           {Topic: ports.TopicOrderCreate, MessageID: "b", Tag: "A|B", Body: []byte("x")},
		"reserved property":    {Topic: ports.TopicOrderCreate, MessageID: "c", Body: []byte("x"), Properties: map[string]string{"KEYS": "k"}},
		"FIFO without group":   {Topic: ports.TopicOrderStateFIFO, MessageID: "d", Body: []byte("x")},
		"group on NORMAL":      {Topic: ports.TopicOrderCreate, MessageID: "e", MessageGroup: "g", Body: []byte("x")},
		"delay beyond 1 day":   {Topic: ports.TopicOrderTimeout, MessageID: "f", DeliverAt: time.Now().Add(48 * time.Hour), Body: []byte("x")},
		"group and delay":      {Topic: ports.TopicOrderTimeout, MessageID: "g", MessageGroup: "g", DeliverAt: time.Now().Add(time.Minute), Body: []byte("x")},
		"unknown topic":        {Topic: "NOPE", MessageID: "h", Body: []byte("x")},
		"no message id":        {Topic: ports.TopicOrderCreate, Body: []byte("x")},
		"body above 4 MiB":     {Topic: ports.TopicOrderCreate, MessageID: "i", Body: make([]byte, 4<<20+1)},
		"message group > 64 B": {Topic: ports.TopicOrderStateFIFO, MessageID: "j", MessageGroup: string(make([]byte, 65)), Body: []byte("x")},
	}
	for name, msg := range cases {
		_, err := pub.Publish(context.Background(), msg)
		if !errors.Is(err, ports.ErrSendRejected) {
			t.Errorf("%s: %v, want ErrSendRejected", name, err)
		}
	}
}

// (d) With the broker connection blackholed, Publish returns ErrSendUnknown
// within its deadline; once the partition heals, sends succeed again.
// Not parallel: it redirects the process's gRPC dials (mqtest.RedirectThrough).
func TestPublishBlackholedIsUnknown(t *testing.T) {
	env := mqtest.NewEnv(t)
	proxy, err := faultproxy.New(env.Config.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	env.RedirectThrough(proxy.Addr())

	cfg := env.Config
	cfg.SendTimeout = 200 * time.Millisecond
	reg := prometheus.NewRegistry()
	pub := startPublisher(t, cfg, reg)
	if proxy.Conns() == 0 {
		t.Fatal("the publisher's connection does not go through the fault proxy")
	}
	send := func(id string) error {
		_, err := pub.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Body: []byte("{}")})
		return err
	}
	if err := retryUntilOK(func() error { return send("evt_before") }); err != nil {
		t.Fatalf("send through the proxy in pass mode: %v", err)
	}

	// A send to a broker that is still warming up may have timed out
	// before evt_before went through: count from here.
	topic := env.Topic(ports.TopicOrderCreate)
	unknownBefore := metricValue(t, reg, "mq_publish_unknown_total", map[string]string{"topic": topic})
	proxy.SetBlackhole()
	start := time.Now()
	err = send("evt_blackholed")
	elapsed := time.Since(start)
	if !errors.Is(err, ports.ErrSendUnknown) || errors.Is(err, ports.ErrSendRejected) {
		t.Fatalf("blackholed publish: %v, want ErrSendUnknown", err)
	}
	// Bounded by the send deadline, not by the client's 3 s request timeout.
	if elapsed >= rocketmq.DefaultRequestTimeout {
		t.Fatalf("blackholed publish returned after %v, not bounded by its %v deadline", elapsed, cfg.SendTimeout)
	}
	if got := metricValue(t, reg, "mq_publish_unknown_total", map[string]string{"topic": topic}) - unknownBefore; got != 1 {
		t.Errorf("mq_publish_unknown_total rose by %v for the blackholed send, want 1", got)
	}

	proxy.SetPass()
	if err := retryUntilOK(func() error { return send("evt_after") }); err != nil {
		t.Fatalf("send after the partition healed: %v", err)
	}
}

// retryUntilOK retries f a few times (a send through a just-healed
// connection may still time out).
func retryUntilOK(f func() error) error {
	var err error
	for range 20 {
		if err = f(); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return err
}

// (c) A DELAY message is not delivered before its delivery time (less the
// broker's 1 s timer precision: the timer wheel rounds the delivery time
// down to timerPrecisionMs) and is delivered after it.
func TestDelayMessageNotDeliveredEarly(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	pub := startPublisher(t, relaxed(env.Config), nil)
	topic := env.Topic(ports.TopicOrderTimeout)
	const precision = time.Second // broker.conf timerPrecisionMs=1000

	rec := newRecorder()
	startRunner(t, env.Config, fastRunner(env.Group(rocketmq.GroupOrderTimeout), map[string]string{topic: ""}, 1),
		eachMessage(rec, func(ports.Delivery) ports.Decision { return ports.Acked("checked") }), nil)

	deliverAt := time.Now().Add(3 * time.Second)
	mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: "evt_delay", Tag: "CANCEL_IF_UNPAID", DeliverAt: deliverAt, Body: []byte("{}")})
	got := rec.waitFor(t, 30*time.Second, "the delayed message", func(ds []ports.Delivery) bool { return len(ds) > 0 })
	received := time.Now()
	if received.Before(deliverAt.Add(-precision)) {
		t.Fatalf("delay message received at %v, before its delivery time %v minus the timer precision %v", received, deliverAt, precision)
	}
	if got[0].Properties["message_id"] != "evt_delay" || got[0].Tag != "CANCEL_IF_UNPAID" {
		t.Fatalf("delivery = %+v", got[0])
	}
	t.Logf("delivered %v after the requested delivery time", received.Sub(deliverAt))
}

// (b) FIFO: messages of one message group are received in send order (50
// messages, 3 groups, interleaved), with several concurrent handler slots.
func TestFIFOOrderPerGroup(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	pub := startPublisher(t, relaxed(env.Config), nil)
	topic := env.Topic(ports.TopicOrderStateFIFO)
	groups := []string{"ord_a", "ord_b", "ord_c"}
	const n = 50
	for i := range n {
		g := groups[i%len(groups)]
		mustPublish(t, pub, ports.OutboundMessage{
			Topic: ports.TopicOrderStateFIFO, MessageID: fmt.Sprintf("%s-%03d", g, i), Tag: "ORDER_STATE_CHANGED",
			MessageGroup: g, Body: []byte(fmt.Sprint(i)), Properties: map[string]string{"seq": fmt.Sprint(i)},
		})
	}

	rec := newRecorder()
	rc := fastRunner(env.Group(rocketmq.GroupOrderProjection), map[string]string{topic: ""}, 4)
	rc.Orderly, rc.BatchSize = true, 4
	startRunner(t, env.Config, rc, handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		for i, d := range ds {
			rec.add(d)
			time.Sleep(2 * time.Millisecond) // let batches overlap
			out[i] = ports.Acked("projected")
		}
		return out
	}), nil)

	got := rec.waitFor(t, 60*time.Second, "50 deliveries", func(ds []ports.Delivery) bool { return len(ds) >= n })
	last := map[string]int{}
	for _, d := range got {
		var seq int
		if _, err := fmt.Sscan(d.Properties["seq"], &seq); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[d.MessageGroup]; ok && seq <= prev {
			t.Errorf("group %s: message %d received after %d", d.MessageGroup, seq, prev)
		}
		last[d.MessageGroup] = seq
	}
	if len(got) != n {
		t.Errorf("received %d deliveries, want %d (no redelivery expected)", len(got), n)
	}
}

// metricValue returns the value of the counter or gauge name whose labels
// are exactly labels (0 when absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
