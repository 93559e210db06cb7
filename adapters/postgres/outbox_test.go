package postgres_test

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

func outMsg(id, group string) ports.OutboundMessage {
	return ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: id, Tag: "STATE",
		Keys: []string{"k-" + id}, MessageGroup: group, Body: []byte(`{"id":"` + id + `"}`),
		Properties: map[string]string{"message_id": id}}
}

func appendOutbox(t *testing.T, e *env, msgs ...ports.OutboundMessage) {
	t.Helper()
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendOutbox(ctx, msgs) })
}

// claimOnce claims in its own transaction and, when publish is set, marks
// what it claimed published.
func claimOnce(t *testing.T, e *env, limit int, publish bool) []ports.OutboxRecord {
	t.Helper()
	var recs []ports.OutboxRecord
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if recs, err = tx.ClaimOutbox(ctx, limit); err != nil || !publish {
			return err
		}
		return tx.MarkPublished(ctx, ids(recs))
	})
	return recs
}

// claimUntil claims (and publishes) until want message ids were seen,
// returning every record seen in claim order. The xmin fence is global to
// the PostgreSQL instance, so a transaction of another test may hold the
// relay back for a moment: claims are repeated until the rows show up.
func claimUntil(t *testing.T, e *env, want int) []ports.OutboxRecord {
	t.Helper()
	var seen []ports.OutboxRecord
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < want {
		if time.Now().After(deadline) {
			t.Fatalf("claimed %v, want %d rows", messageIDs(seen), want)
		}
		recs := claimOnce(t, e, 100, true)
		if len(recs) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		seen = append(seen, recs...)
	}
	return seen
}

func ids(recs []ports.OutboxRecord) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func messageIDs(recs []ports.OutboxRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Message.MessageID
	}
	return out
}

// Every field survives the outbox; published rows are not claimed again;
// deferred rows count attempts and wait until due; pruning removes only
// published rows older than the cut-off, up to the limit.
func TestOutboxRoundTripDeferPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	deliver := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	delay := ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: "m-delay", Tag: "TIMEOUT",
		Keys: []string{"a", "b"}, DeliverAt: deliver, Body: []byte{0, 1, 2},
		Properties: map[string]string{"x": "y", "message_id": "m-delay"}}
	plain := ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: "m-plain", Body: []byte("{}")}
	appendOutbox(t, e, delay, plain, outMsg("m-fifo", "ord-1"))

	recs := claimUntil(t, e, 3)
	if len(recs) != 3 {
		t.Fatalf("claimed %v", messageIDs(recs))
	}
	if !reflect.DeepEqual(recs[0].Message, delay) || !reflect.DeepEqual(recs[1].Message, plain) ||
		!reflect.DeepEqual(recs[2].Message, outMsg("m-fifo", "ord-1")) {
		t.Fatalf("round trip:\n%+v\n%+v\n%+v", recs[0].Message, recs[1].Message, recs[2].Message)
	}
	if recs[0].Attempts != 0 {
		t.Fatalf("attempts = %d", recs[0].Attempts)
	}
	if again := claimOnce(t, e, 100, false); len(again) != 0 {
		t.Fatalf("published rows claimed again: %v", messageIDs(again))
	}

	appendOutbox(t, e, outMsg("m-retry", ""))
	r := claimUntil(t, e, 1)[0]
	// Undo the helper's publication to exercise the failure path.
	if _, err := e.db.Exec(testCtx(t), `UPDATE event_outbox SET published_at = NULL WHERE id = $1`, r.ID); err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.DeferOutbox(ctx, []int64{r.ID}, time.Now().Add(time.Hour), "send timeout")
	})
	if got := claimOnce(t, e, 100, false); len(got) != 0 {
		t.Fatalf("deferred row claimed before due: %v", messageIDs(got))
	}
	var lastErr string
	if err := e.db.QueryRow(testCtx(t), `SELECT last_error FROM event_outbox WHERE id = $1`, r.ID).Scan(&lastErr); err != nil || lastErr != "send timeout" {
		t.Fatalf("last_error = %q, %v", lastErr, err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.DeferOutbox(ctx, []int64{r.ID}, time.Now().Add(-time.Second), "again")
	})
	if got := claimUntil(t, e, 1); got[0].ID != r.ID || got[0].Attempts != 2 {
		t.Fatalf("re-claimed %+v, want row %d with 2 attempts", got[0], r.ID)
	}

	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if n, err := tx.PruneOutbox(ctx, now.Add(-time.Hour), 100); err != nil || n != 0 {
			t.Errorf("prune of old rows = %d, %v; want 0", n, err)
		}
		if n, err := tx.PruneOutbox(ctx, now.Add(time.Hour), 2); err != nil || n != 2 {
			t.Errorf("prune limited to 2 = %d, %v", n, err)
		}
		return nil
	})
	if n := e.count(t, `SELECT count(*) FROM event_outbox`); n != 2 {
		t.Fatalf("%d rows after pruning 2 of 4", n)
	}
}

// The relay fence: while transaction A (older) is in flight, rows of a
// younger transaction B that committed are not claimable, so B's event of
// an order is never published before A's and A is never skipped; once A
// commits, A's rows are claimable first ((txid, id) order) and the FIFO
// group advances one message at a time.
func TestOutboxFenceKeepsInFlightTransactionsFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	appendOutbox(t, e, outMsg("z-before", "")) // committed before A starts

	aWrote, aRelease := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var aErr error
	releaseA := sync.OnceFunc(func() { close(aRelease) })
	t.Cleanup(func() { releaseA(); wg.Wait() }) // also when the test fails early
	wg.Go(func() {
		aErr = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			if err := tx.AppendOutbox(ctx, []ports.OutboundMessage{outMsg("a1", "ord-1")}); err != nil {
				close(aWrote)
				return err
			}
			close(aWrote)
			<-aRelease
			return nil
		})
	})
	<-aWrote
	appendOutbox(t, e, outMsg("b1", "ord-1"), outMsg("b2", ""))

	first := claimUntil(t, e, 1)
	if got := messageIDs(first); !slices.Equal(got, []string{"z-before"}) {
		t.Fatalf("claimed %v while A is in flight, want only the row older than A", got)
	}
	for range 3 {
		if got := claimOnce(t, e, 100, true); len(got) != 0 {
			t.Fatalf("claimed %v while A is in flight: B's rows must wait for A", messageIDs(got))
		}
	}

	releaseA()
	wg.Wait()
	if aErr != nil {
		t.Fatal(aErr)
	}
	var order []string
	for len(order) < 3 {
		got := messageIDs(claimUntil(t, e, 1))
		if slices.Contains(got, "b1") && !slices.Contains(order, "a1") && !slices.Contains(got, "a1") {
			t.Fatalf("b1 claimed before a1: %v then %v", order, got)
		}
		if slices.Contains(got, "a1") && slices.Contains(got, "b1") {
			t.Fatalf("a1 and b1 of one group claimed together: %v", got)
		}
		order = append(order, got...)
	}
	// b2 (no group) may come with a1 or after it, depending on other
	// transactions of the instance; a1 always precedes b1.
	sorted := slices.Sorted(slices.Values(order))
	if !slices.Equal(sorted, []string{"a1", "b1", "b2"}) || slices.Index(order, "a1") > slices.Index(order, "b1") {
		t.Fatalf("claim order %v: want a1, b1, b2 each once, a1 before b1", order)
	}
}

// A FIFO group waits behind its earliest unpublished row (here deferred);
// other groups are not held back.
func TestOutboxGroupWaitsForItsHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	appendOutbox(t, e, outMsg("g1-first", "g1"))
	head := claimUntil(t, e, 1)[0]
	if _, err := e.db.Exec(testCtx(t), `UPDATE event_outbox SET published_at = NULL WHERE id = $1`, head.ID); err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.DeferOutbox(ctx, []int64{head.ID}, time.Now().Add(time.Hour), "broker down")
	})
	appendOutbox(t, e, outMsg("g1-second", "g1"), outMsg("g2-first", "g2"))
	got := claimUntil(t, e, 1)
	if ids := messageIDs(got); !slices.Equal(ids, []string{"g2-first"}) {
		t.Fatalf("claimed %v, want only g2-first while g1's head is deferred", ids)
	}
	if _, err := e.db.Exec(testCtx(t), `UPDATE event_outbox SET available_at = now() WHERE id = $1`, head.ID); err != nil {
		t.Fatal(err)
	}
	if ids := messageIDs(claimUntil(t, e, 2)); !slices.Equal(ids, []string{"g1-first", "g1-second"}) {
		t.Fatalf("claimed %v, want g1 in order", ids)
	}
}

// Concurrent relays never claim the same row, and together publish all.
func TestOutboxConcurrentClaimersNeverShareRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{MaxConns: 10})
	const rows = 200
	msgs := make([]ports.OutboundMessage, rows)
	for i := range msgs {
		msgs[i] = outMsg(newID("evt"), "")
	}
	appendOutbox(t, e, msgs...)

	var (
		mu      sync.Mutex
		claimed = map[int64]int{}
		wg      sync.WaitGroup
	)
	deadline := time.Now().Add(20 * time.Second)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				var got []ports.OutboxRecord
				err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
					var err error
					if got, err = tx.ClaimOutbox(ctx, 7); err != nil {
						return err
					}
					time.Sleep(time.Millisecond) // hold the locks while "publishing"
					return tx.MarkPublished(ctx, ids(got))
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range got {
					claimed[r.ID]++
				}
				done := len(claimed) == rows
				mu.Unlock()
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	if len(claimed) != rows {
		t.Fatalf("%d of %d rows claimed", len(claimed), rows)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Fatalf("row %d claimed %d times", id, n)
		}
	}
}
