package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// TestRetryTiersAndDeadLetter: a message never acknowledged comes back
// MaxRetries times, each after the backoff (doubling: 100, 200, 400 ms)
// through the delay tiers, with DeliveryAttempt 1..MaxRetries+1; then it
// is rejected into the group's dead-letter queue, where the dead-letter
// runner hands it over with its message id, properties and body kept and
// its origin (group, deliveries) told. A RetryAfter decision of another
// message brings it back after at least that delay.
func TestRetryTiersAndDeadLetter(t *testing.T) {
	t.Parallel()
	const maxRetries = 3
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_RETRY", Topic: ports.TopicOrderCreate, MaxRetries: maxRetries}
	g := env.AddGroup(sub)
	rec := newRecorder()
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: 2, BatchSize: 4,
		RetryBackoff: 100 * time.Millisecond},
		rec.handler(func(d ports.Delivery) ports.Decision {
			if d.Properties["message_id"] == "ord_later" {
				if d.DeliveryAttempt == 1 {
					return ports.RetryLater("transient", 1500*time.Millisecond)
				}
				return ports.Acked("created")
			}
			return ports.Decision{Outcome: "transient"}
		}), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, r)

	dead := newRecorder()
	var (
		mu      sync.Mutex
		origins []rabbitmq.DeadLetter
	)
	dr, err := rabbitmq.NewDeadLetterRunner(env.Config, env.Topology(),
		func(origin func(ports.Delivery) (rabbitmq.DeadLetter, bool)) ports.BatchHandler {
			return dead.handler(func(d ports.Delivery) ports.Decision {
				o, ok := origin(d)
				if !ok {
					t.Errorf("dead letter %s without origin", d.Properties["message_id"])
				}
				mu.Lock()
				origins = append(origins, o)
				mu.Unlock()
				return ports.Acked("stored")
			})
		}, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, dr)

	p := startPublisher(t, env.Config)
	for _, id := range []string{"ord_failing", "ord_later"} {
		if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id,
			Tag: "CREATE_ORDER", Keys: []string{"rsv_" + id}, Body: []byte(`{"id":"` + id + `"}`),
			Properties: map[string]string{"reservation_id": "rsv_" + id}}); err != nil {
			t.Fatal(err)
		}
	}
	got := dead.waitFor(t, 30*time.Second, "the dead letter", func(rs []record) bool { return len(rs) > 0 })
	dl := got[0].d
	if dl.Properties["message_id"] != "ord_failing" || dl.Properties["reservation_id"] != "rsv_ord_failing" ||
		string(dl.Body) != `{"id":"ord_failing"}` || dl.Tag != "CREATE_ORDER" || dl.Topic != g.DLQ {
		t.Errorf("dead letter: id %q props %v body %q tag %q topic %q; want the original from %s", dl.Properties["message_id"],
			dl.Properties, dl.Body, dl.Tag, dl.Topic, g.DLQ)
	}
	mu.Lock()
	o := origins[0]
	mu.Unlock()
	if o.SourceGroup != g.Name || o.SourceDeliveries != maxRetries+1 || o.LogicalTopic != ports.TopicOrderCreate || o.Reason != "rejected" {
		t.Errorf("origin %+v, want group %s, %d deliveries, rejected", o, g.Name, maxRetries+1)
	}

	rs := of(rec.snapshot(), "ord_failing")
	if len(rs) != maxRetries+1 {
		t.Fatalf("ord_failing delivered %d times, want %d", len(rs), maxRetries+1)
	}
	for i, r := range rs {
		if r.d.DeliveryAttempt != int32(i+1) {
			t.Errorf("delivery %d has attempt %d", i+1, r.d.DeliveryAttempt)
		}
		if i > 0 {
			backoff := 100 * time.Millisecond << (i - 1)
			if gap := r.at.Sub(rs[i-1].at); gap < backoff {
				t.Errorf("delivery %d came %v after the previous one, want at least the backoff %v", i+1, gap, backoff)
			} else {
				t.Logf("delivery %d: %v after the previous (backoff %v)", i+1, gap, backoff)
			}
		}
	}
	later := rec.waitFor(t, 30*time.Second, "ord_later's redelivery", func(rs []record) bool { return len(of(rs, "ord_later")) >= 2 })
	lr := of(later, "ord_later")
	if gap := lr[1].at.Sub(lr[0].at); gap < 1500*time.Millisecond || lr[1].d.DeliveryAttempt != 2 {
		t.Errorf("ord_later redelivered after %v as attempt %d, want >= 1.5 s, attempt 2", gap, lr[1].d.DeliveryAttempt)
	}
	if n := env.QueueDepth(g.DLQ); n != 0 {
		t.Errorf("the dead-letter queue still holds %d messages after the reader acknowledged", n)
	}
}

// TestOrderedDeadLetterKeepsOrder: on an ordered group a message left
// unacknowledged holds its shard: it is redelivered first (requeued at
// the head, x-delivery-count counting) until its retries run out, then
// dead-lettered, and only then does the next message of its group come.
func TestOrderedDeadLetterKeepsOrder(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil, rabbittest.WithShards(2))
	sub := ports.Subscription{Group: "CG_PROJ", Topic: ports.TopicOrderStateFIFO, Ordered: true, MaxRetries: 2}
	g := env.AddGroup(sub)
	rec := newRecorder()
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: 2,
		RetryBackoff: 50 * time.Millisecond},
		rec.handler(func(d ports.Delivery) ports.Decision {
			if d.Properties["message_id"] == "st_1" {
				return ports.Decision{Outcome: "transient"}
			}
			return ports.Acked("projected")
		}), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, r)
	p := startPublisher(t, env.Config)
	for i := range 3 {
		id := fmt.Sprintf("st_%d", i)
		if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: id,
			MessageGroup: "ord_1", Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.waitFor(t, 30*time.Second, "st_2", func(rs []record) bool { return len(of(rs, "st_2")) > 0 })
	var seq []string
	for _, r := range got {
		seq = append(seq, fmt.Sprintf("%s#%d", r.d.Properties["message_id"], r.d.DeliveryAttempt))
	}
	if want := "[st_0#1 st_1#1 st_1#2 st_1#3 st_2#1]"; fmt.Sprint(seq) != want {
		t.Fatalf("deliveries %v, want %s", seq, want)
	}
	env.WaitDepth(context.Background(), g.DLQ, 1, 10*time.Second)
	if d, ok := env.Get(g.DLQ); !ok || d.MessageId != "st_1" {
		t.Fatalf("dead-letter queue head %q (%v), want st_1", d.MessageId, ok)
	}
}

// TestFIFOOrderAcrossShards: the messages of many message groups spread
// over the shard queues by the hash of their group; with two runners of
// the same group (two service instances: single-active-consumer gives
// each shard to one of them) every group's messages are delivered in
// publish order.
func TestFIFOOrderAcrossShards(t *testing.T) {
	t.Parallel()
	const groups, perGroup, shards = 16, 12, 4
	env := rabbittest.NewEnv(t, nil, rabbittest.WithShards(shards))
	sub := ports.Subscription{Group: "CG_PROJ", Topic: ports.TopicOrderStateFIFO, Ordered: true, MaxRetries: 5}
	env.AddGroup(sub)
	rec := newRecorder()
	for range 2 {
		r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: shards},
			rec.handler(func(ports.Delivery) ports.Decision { return ports.Acked("projected") }), testLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		startRunner(t, r)
	}
	p := startPublisher(t, env.Config)
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perGroup {
				id := fmt.Sprintf("st_g%d_%d", g, i)
				if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO,
					MessageID: id, MessageGroup: fmt.Sprintf("ord_%d", g), Body: []byte(id)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := rec.waitFor(t, 60*time.Second, "every message", func(rs []record) bool { return len(rs) >= groups*perGroup })
	next := map[string]int{}
	usedShards := map[int32]bool{}
	for _, r := range got {
		g := r.d.MessageGroup
		want := fmt.Sprintf("st_g%s_%d", g[len("ord_"):], next[g])
		if id := r.d.Properties["message_id"]; id != want {
			t.Fatalf("group %s: got %s, want %s (publish order)", g, id, want)
		}
		next[g]++
		usedShards[r.d.Queue] = true
	}
	if len(usedShards) < 2 {
		t.Errorf("16 message groups landed on %d shard(s) of %d", len(usedShards), shards)
	}
}

// TestDelayedDeliveryPrecision: a DELAY message is delivered no earlier
// than its DeliverAt, through a chain of delay tiers; the lateness is
// logged (README.md states the precision).
func TestDelayedDeliveryPrecision(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_TIMEOUT", Topic: ports.TopicOrderTimeout, MaxRetries: 3}
	rec := newRecorder()
	runGroup(t, env, sub, 2, 8, rec.handler(func(ports.Delivery) ports.Decision { return ports.Acked("canceled") }))
	p := startPublisher(t, env.Config)
	delays := []time.Duration{0, 90 * time.Millisecond, 300 * time.Millisecond, 1700 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second}
	due := map[string]time.Time{}
	for i, d := range delays {
		id := fmt.Sprintf("cancel_%d", i)
		due[id] = time.Now().Add(d)
		if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: id,
			Tag: "CANCEL_ORDER_IF_UNPAID", DeliverAt: due[id], Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.waitFor(t, 30*time.Second, "every delayed message", func(rs []record) bool { return len(rs) >= len(delays) })
	for _, r := range got {
		id := r.d.Properties["message_id"]
		late := r.at.Sub(due[id])
		if late < 0 {
			t.Errorf("%s delivered %v before its DeliverAt", id, -late)
		}
		if r.d.DeliveryAttempt != 1 {
			t.Errorf("%s delivered as attempt %d, want 1 (parking is not a delivery)", id, r.d.DeliveryAttempt)
		}
		t.Logf("%s: delivered %v after its DeliverAt", id, late)
	}
}

// TestRunnerSurvivesConnectionLoss: a runner whose connection the network
// resets keeps consuming once the network is back (the client's recovery
// reconnects, or the runner reopens its channel), and what it acknowledges
// afterwards leaves the queue.
func TestRunnerSurvivesConnectionLoss(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_AUDIT", Topic: ports.TopicOrderEvent, MaxRetries: 3}
	env.AddGroup(sub)
	proxy, err := faultproxy.New(brokerAddr(t, env.Config.URL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg := env.Config
	cfg.URL = viaProxy(t, cfg.URL, proxy.Addr())
	cfg.ReconnectInterval = 200 * time.Millisecond
	rec := newRecorder()
	r, err := rabbitmq.NewRunner(cfg, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: 2},
		rec.handler(func(ports.Delivery) ports.Decision { return ports.Acked("audited") }), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRunner(t, r)
	p := startPublisher(t, env.Config)
	if _, err := p.Publish(context.Background(), event("evt_before")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 30*time.Second, "evt_before", func(rs []record) bool { return len(of(rs, "evt_before")) > 0 })
	proxy.SetReset()
	if _, err := p.Publish(context.Background(), event("evt_during")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	proxy.SetPass()
	if _, err := p.Publish(context.Background(), event("evt_after")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 60*time.Second, "the messages published during and after the outage", func(rs []record) bool {
		return len(of(rs, "evt_during")) > 0 && len(of(rs, "evt_after")) > 0
	})
	// Stopped, the runner's connection closes and anything it holds
	// unacknowledged returns to the head of the queue: a second runner then
	// gets it before a barrier published afterwards.
	stop()
	if _, err := p.Publish(context.Background(), event("evt_barrier")); err != nil {
		t.Fatal(err)
	}
	second := newRecorder()
	runGroup(t, env, sub, 1, 1, second.handler(func(ports.Delivery) ports.Decision { return ports.Acked("audited") }))
	got := second.waitFor(t, 30*time.Second, "the barrier", func(rs []record) bool { return len(of(rs, "evt_barrier")) > 0 })
	if id := got[0].d.Properties["message_id"]; id != "evt_barrier" {
		t.Fatalf("after the runner stopped, %s came back before the barrier: it was handled but never acknowledged", id)
	}
}

// TestCrashedConsumersDeadLetterAtTheLimit: a message whose consumers
// die holding it (the channel closes unacknowledged) comes back with
// x-delivery-count counting; past the group's MaxRetries the quorum queue
// dead-letters it on its own (reason delivery_limit), and the dead-letter
// runner tells its origin with every delivery counted.
func TestCrashedConsumersDeadLetterAtTheLimit(t *testing.T) {
	t.Parallel()
	const maxRetries = 2
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_CRASH", Topic: ports.TopicInventoryCompensate, MaxRetries: maxRetries}
	g := env.AddGroup(sub)
	p := startPublisher(t, env.Config)
	if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicInventoryCompensate,
		MessageID: "rel_crash", Body: []byte(`{"x":1}`)}); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(env.Config.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	for i := range maxRetries + 1 {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume(g.Queues[0], "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-ds:
			if got := d.Headers["x-delivery-count"]; i > 0 && got != int64(i) {
				t.Errorf("delivery %d: x-delivery-count %v, want %d", i+1, got, i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d did not come", i+1)
		}
		_ = ch.Close() // the consumer "crashes" holding the message
	}
	dead := newRecorder()
	var (
		mu     sync.Mutex
		origin rabbitmq.DeadLetter
	)
	dr, err := rabbitmq.NewDeadLetterRunner(env.Config, env.Topology(),
		func(of func(ports.Delivery) (rabbitmq.DeadLetter, bool)) ports.BatchHandler {
			return dead.handler(func(d ports.Delivery) ports.Decision {
				o, _ := of(d)
				mu.Lock()
				origin = o
				mu.Unlock()
				return ports.Acked("stored")
			})
		}, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, dr)
	got := dead.waitFor(t, 30*time.Second, "the dead letter", func(rs []record) bool { return len(rs) > 0 })
	if id := got[0].d.Properties["message_id"]; id != "rel_crash" {
		t.Fatalf("dead letter %q, want rel_crash", id)
	}
	mu.Lock()
	defer mu.Unlock()
	if origin.Reason != "delivery_limit" || origin.SourceDeliveries != maxRetries+1 || origin.SourceGroup != g.Name {
		t.Errorf("origin %+v, want %s, delivery_limit, %d deliveries", origin, g.Name, maxRetries+1)
	}
}

// TestOrderedHoldFreesTheHandlerSlot: an ordered message waiting for its
// RetryAfter holds its shard but not a handler slot: with one slot, a
// message of another shard is handled during the wait.
func TestOrderedHoldFreesTheHandlerSlot(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil, rabbittest.WithShards(2))
	sub := ports.Subscription{Group: "CG_PROJ", Topic: ports.TopicOrderStateFIFO, Ordered: true, MaxRetries: 5}
	env.AddGroup(sub)
	topo := env.Topology()
	held, other := "ord_held", ""
	for i := 0; other == ""; i++ {
		if g := fmt.Sprint("ord_", i); topo.ShardOf(g) != topo.ShardOf(held) {
			other = g
		}
	}
	rec := newRecorder()
	runGroup(t, env, sub, 1, 1, rec.handler(func(d ports.Delivery) ports.Decision {
		if d.MessageGroup == held && d.DeliveryAttempt == 1 {
			return ports.RetryLater("transient", 2*time.Second)
		}
		return ports.Acked("projected")
	}))
	p := startPublisher(t, env.Config)
	if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: "st_held",
		MessageGroup: held, Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, 30*time.Second, "st_held", func(rs []record) bool { return len(of(rs, "st_held")) > 0 })
	if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: "st_other",
		MessageGroup: other, Body: []byte("other")}); err != nil {
		t.Fatal(err)
	}
	got := rec.waitFor(t, 30*time.Second, "st_held's redelivery", func(rs []record) bool { return len(of(rs, "st_held")) >= 2 })
	var seq []string
	for _, r := range got {
		seq = append(seq, fmt.Sprintf("%s#%d", r.d.Properties["message_id"], r.d.DeliveryAttempt))
	}
	if want := "[st_held#1 st_other#1 st_held#2]"; fmt.Sprint(seq) != want {
		t.Fatalf("deliveries %v, want %s (the other shard handled during the hold)", seq, want)
	}
}
