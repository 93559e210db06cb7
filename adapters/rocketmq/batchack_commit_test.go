package rocketmq_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// TestBatchAckOnlyAfterCommit: "acknowledged only after its effect
// committed" holds per message with batched acknowledgements. Six
// messages wait in one queue, so that the runner receives them in one
// batch; the handler writes each one's effect in a PostgreSQL transaction
// of its own, and the COMMIT of one of them fails twice (a deferred
// constraint trigger refuses it). That message alone is not acknowledged
// and comes back until its commit succeeds; the five others, acknowledged
// together, are never delivered again (by the failing message's third
// delivery they would have been, after the same invisible duration), and
// every effect is committed exactly once.
func TestBatchAckOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t, mqtest.WithQueues(1))
	pool := pgtest.Pool(t, pgtest.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	effects := pgtest.NewRefusingEffects(t, ctx, pool, "evt_bad", 2)

	pub := startPublisher(t, relaxed(env.Config), nil)
	ids := []string{"evt_0", "evt_1", "evt_bad", "evt_2", "evt_3", "evt_4"}
	for _, id := range ids {
		mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: "CREATE_ORDER", Body: []byte(`{}`)})
	}

	var (
		mu         sync.Mutex
		batches    [][]string
		commitErrs int
	)
	rec := newRecorder()
	handler := handlerFunc(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
		out := make([]ports.Decision, len(ds))
		var batch []string
		for i, d := range ds {
			id := d.Properties[message.PropMessageID]
			batch = append(batch, id)
			// Recorded once its commit was tried, so that the wait for the
			// third delivery below also waits for that delivery's commit.
			if err := effects.Commit(ctx, id); err != nil {
				mu.Lock()
				commitErrs++
				mu.Unlock()
				out[i] = ports.Decision{Outcome: "transient"}
				rec.add(d)
				continue
			}
			out[i] = ports.Acked("committed")
			rec.add(d)
		}
		mu.Lock()
		batches = append(batches, batch)
		mu.Unlock()
		return out
	})
	rc := fastRunner(env.Group(rocketmq.GroupOrderCreate), map[string]string{env.Topic(ports.TopicOrderCreate): "*"}, 1)
	startRunner(t, env.Config, rc, handler, nil)

	rec.waitFor(t, 90*time.Second, "the refused message's third delivery", func(ds []ports.Delivery) bool {
		return len(byMessageID(ds)["evt_bad"]) >= 3
	})
	got := byMessageID(rec.snapshot())
	for _, id := range ids {
		want := 1
		if id == "evt_bad" {
			want = 3
		}
		if len(got[id]) != want {
			t.Errorf("%s delivered %d times, want %d: %s", id, len(got[id]), want, describe(got[id]))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if commitErrs != 2 {
		t.Errorf("%d failed commits, want 2", commitErrs)
	}
	mixed := slices.ContainsFunc(batches, func(b []string) bool { return len(b) > 1 && slices.Contains(b, "evt_bad") })
	if !mixed {
		t.Errorf("no received batch held the refused message with others: %v", batches)
	}
	if n, err := effects.Count(ctx); err != nil || n != len(ids) {
		t.Fatalf("%d effects committed (%v), want %d", n, err, len(ids))
	}
	t.Logf("batches: %s", fmt.Sprint(batches))
}
