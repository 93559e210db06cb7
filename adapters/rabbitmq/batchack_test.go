package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// gathered sums metric name over its series in reg: a counter's or
// gauge's value, or a histogram's sum and count. It may be called from a
// handler's goroutine (a failure is reported with Errorf).
func gathered(t *testing.T, reg *prometheus.Registry, name string) (value float64, count uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Errorf("gather metrics: %v", err)
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetHistogram() != nil:
				value += m.GetHistogram().GetSampleSum()
				count += m.GetHistogram().GetSampleCount()
			case m.GetCounter() != nil:
				value += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				value += m.GetGauge().GetValue()
			}
		}
	}
	return value, count
}

// publishAll publishes one ORDER_CREATE message per id, in order, and
// waits until queue holds them all, so that a runner started next
// receives them together.
func publishAll(t *testing.T, env *rabbittest.Env, queue string, ids []string) {
	t.Helper()
	p := startPublisher(t, env.Config)
	for _, id := range ids {
		if _, err := p.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id,
			Tag: "CREATE_ORDER", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	env.WaitDepth(context.Background(), queue, len(ids), 10*time.Second)
}

// TestBatchAckOnlyAfterCommit: "acknowledged only after its effect
// committed" holds per message with multiple acks. Six messages wait in
// the group's queue, so that the runner receives them in one batch; the
// handler writes each one's effect in a PostgreSQL transaction of its
// own, and the COMMIT of one of them fails twice (a deferred constraint
// trigger refuses it). That message alone is not acknowledged and comes
// back (through the delay tier) until its commit succeeds; the five
// others are acknowledged by multiple acks and never delivered again -
// after the runner stopped, which would return anything left
// unacknowledged, the queue is empty - and every effect is committed
// exactly once.
func TestBatchAckOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_BATCHACK", Topic: ports.TopicOrderCreate, MaxRetries: 5}
	g := env.AddGroup(sub)
	pool := pgtest.Pool(t, pgtest.NewEmptyDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	effects := pgtest.NewRefusingEffects(t, ctx, pool, "evt_bad", 2)
	ids := []string{"evt_0", "evt_1", "evt_bad", "evt_2", "evt_3", "evt_4"}
	publishAll(t, env, g.Queues[0], ids)

	var (
		mu         sync.Mutex
		batches    [][]string
		commitErrs int
	)
	rec := newRecorder()
	commit := rec.handler(func(d ports.Delivery) ports.Decision {
		id := d.Properties["message_id"]
		if err := effects.Commit(ctx, id); err != nil {
			mu.Lock()
			commitErrs++
			mu.Unlock()
			return ports.Decision{Outcome: "transient"}
		}
		return ports.Acked("committed")
	})
	handler := handlerFunc(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
		var batch []string
		for _, d := range ds {
			batch = append(batch, d.Properties["message_id"])
		}
		mu.Lock()
		batches = append(batches, batch)
		mu.Unlock()
		return commit.HandleBatch(ctx, ds)
	})
	reg := prometheus.NewRegistry()
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: 1, BatchSize: 16,
		RetryBackoff: 100 * time.Millisecond}, handler, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRunner(t, r)

	rec.waitFor(t, 60*time.Second, "the refused message's third delivery", func(rs []record) bool {
		return len(of(rs, "evt_bad")) >= 3
	})
	stop() // lets the handler finish and its acknowledgement go, then closes the channel
	got := rec.snapshot()
	for _, id := range ids {
		want := 1
		if id == "evt_bad" {
			want = 3
		}
		if n := len(of(got, id)); n != want {
			t.Errorf("%s delivered %d times, want %d", id, n, want)
		}
	}
	if n := env.QueueDepth(g.Queues[0]); n != 0 {
		t.Errorf("%d messages back in the queue after the runner stopped: not every committed message was acknowledged", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if commitErrs != 2 {
		t.Errorf("%d failed commits, want 2", commitErrs)
	}
	if !slices.ContainsFunc(batches, func(b []string) bool { return len(b) > 1 && slices.Contains(b, "evt_bad") }) {
		t.Errorf("no batch held the refused message with others: %v", batches)
	}
	if n, err := effects.Count(ctx); err != nil || n != len(ids) {
		t.Fatalf("%d effects committed (%v), want %d", n, err, len(ids))
	}
	acked, calls := gathered(t, reg, "mq_ack_batch_messages")
	if acked != float64(len(ids)) || calls == 0 {
		t.Errorf("multiple acks covered %v messages in %d calls, want %d (each committed message once)", acked, calls, len(ids))
	}
	if failed, _ := gathered(t, reg, "mq_ack_failure_total"); failed != 0 {
		t.Errorf("%v acknowledgements failed", failed)
	}
	t.Logf("batches %v; %v messages in %d multiple acks", batches, acked, calls)
}

// TestBatchAckWaitsForEarlierBatch: two batches of one channel run at
// once and the later one finishes first. The first batch's handler
// (the batch holding the queue's first message, so the channel's lowest
// delivery tags) blocks until every other batch in flight has been
// settled by the runner (the inflight gauge is down to its own size); at
// that point no multiple ack may have been sent, since each would cover
// the first batch's undecided deliveries. Then it decides - its first
// message retried (parked: an individual settlement inside the range),
// the others acknowledged - and every message ends acknowledged exactly
// once: after the runner stopped the queue is empty, and no message but
// the retried one was delivered twice.
func TestBatchAckWaitsForEarlierBatch(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_BATCHACK_ORDER", Topic: ports.TopicOrderCreate, MaxRetries: 5}
	g := env.AddGroup(sub)
	var ids []string
	for i := range 8 {
		ids = append(ids, fmt.Sprintf("m%d", i))
	}
	publishAll(t, env, g.Queues[0], ids)

	reg := prometheus.NewRegistry()
	var (
		mu            sync.Mutex
		othersDone    int     // other batches whose handler returned
		ackedEarly    float64 // messages acknowledged while the first batch was undecided
		sawOthersDone int
		blockedFirst  bool
		firstBatch    []string
	)
	rec := newRecorder()
	decide := rec.handler(func(d ports.Delivery) ports.Decision {
		if d.Properties["message_id"] == "m0" && d.DeliveryAttempt == 1 {
			return ports.RetryLater("transient", 100*time.Millisecond)
		}
		return ports.Acked("committed")
	})
	handler := handlerFunc(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
		first := slices.ContainsFunc(ds, func(d ports.Delivery) bool {
			return d.Properties["message_id"] == "m0" && d.DeliveryAttempt == 1
		})
		if !first {
			defer func() {
				mu.Lock()
				othersDone++
				mu.Unlock()
			}()
			return decide.HandleBatch(ctx, ds)
		}
		// Wait (bounded) until another batch returned and the runner
		// settled every batch but this one.
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; i < 3000 && time.Now().Before(deadline); i++ {
			inflight, _ := gathered(t, reg, "mq_consumer_inflight")
			mu.Lock()
			done := othersDone
			mu.Unlock()
			if done > 0 && inflight == float64(len(ds)) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		early, _ := gathered(t, reg, "mq_ack_batch_messages")
		mu.Lock()
		ackedEarly, sawOthersDone, blockedFirst = early, othersDone, true
		for _, d := range ds {
			firstBatch = append(firstBatch, d.Properties["message_id"])
		}
		mu.Unlock()
		return decide.HandleBatch(ctx, ds)
	})
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: 2, BatchSize: 4,
		RetryBackoff: 100 * time.Millisecond}, handler, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRunner(t, r)

	// Every message acknowledged: m0's second delivery and the seven others.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < 6000 && time.Now().Before(deadline); i++ {
		if acked, _ := gathered(t, reg, "mq_ack_batch_messages"); acked >= float64(len(ids)) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	mu.Lock()
	defer mu.Unlock()
	if !blockedFirst || sawOthersDone == 0 {
		t.Fatalf("the first batch (blocked %v) did not wait for a later batch of the channel (%d returned before it)", blockedFirst, sawOthersDone)
	}
	if ackedEarly != 0 {
		t.Errorf("%v messages acknowledged by multiple acks while the first batch %v was undecided", ackedEarly, firstBatch)
	}
	got := rec.snapshot()
	for _, id := range ids {
		want := 1
		if id == "m0" {
			want = 2
		}
		if n := len(of(got, id)); n != want {
			t.Errorf("%s delivered %d times, want %d", id, n, want)
		}
	}
	if n := env.QueueDepth(g.Queues[0]); n != 0 {
		t.Errorf("%d messages back in the queue after the runner stopped: not every acknowledged message was acknowledged", n)
	}
	acked, calls := gathered(t, reg, "mq_ack_batch_messages")
	if acked != float64(len(ids)) {
		t.Errorf("multiple acks covered %v messages in %d calls, want %d", acked, calls, len(ids))
	}
	if failed, _ := gathered(t, reg, "mq_ack_failure_total"); failed != 0 {
		t.Errorf("%v acknowledgements failed", failed)
	}
	t.Logf("first batch %v waited for %d later batch(es); %v messages in %d multiple acks", firstBatch, sawOthersDone, acked, calls)
}
