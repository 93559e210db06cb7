package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

func entries(ids ...string) []ports.InboxEntry {
	out := make([]ports.InboxEntry, len(ids))
	for i, id := range ids {
		out[i] = ports.InboxEntry{MessageID: id, Topic: "ORDER_CREATE", ReservationID: "rsv-" + id, OrderID: "ord-" + id, DeliveryAttempt: 1}
	}
	return out
}

func claim(t *testing.T, e *env, group string, es []ports.InboxEntry) []string {
	t.Helper()
	var got []string
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		got, err = tx.ClaimInbox(ctx, group, es)
		return err
	})
	return got
}

// ClaimInbox returns the newly inserted ids in input order, each once;
// committed ids are not claimed again (per group); FinishInbox and
// InboxStatusOf round-trip.
func TestInboxClaimFinishStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	got := claim(t, e, "g1", entries("m3", "m1", "m3", "m2"))
	if want := []string{"m3", "m1", "m2"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	got = claim(t, e, "g1", entries("m2", "m4", "m1"))
	if want := []string{"m4"}; !slices.Equal(got, want) {
		t.Fatalf("second claim %v, want %v", got, want)
	}
	if c := e.metric(t, "inbox_insert_conflict_total"); c != 2 {
		t.Fatalf("inbox_insert_conflict_total = %v, want 2", c)
	}
	if got := claim(t, e, "g2", entries("m1")); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("other group claimed %v, want [m1]", got)
	}

	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		st, err := tx.InboxStatusOf(ctx, "g1", "m1")
		if err != nil || st != "PROCESSING" {
			t.Errorf("status before finish = %q, %v", st, err)
		}
		return tx.FinishInbox(ctx, "g1", []ports.InboxResult{
			{MessageID: "m1", Status: ports.InboxSucceeded},
			{MessageID: "m2", Status: ports.InboxRejected, Detail: "NO_FINAL_STOCK"},
		})
	})
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		for id, want := range map[string]ports.InboxStatus{"m1": ports.InboxSucceeded, "m2": ports.InboxRejected} {
			if st, err := tx.InboxStatusOf(ctx, "g1", id); err != nil || st != want {
				t.Errorf("status of %s = %q, %v; want %s", id, st, err, want)
			}
		}
		if _, err := tx.InboxStatusOf(ctx, "g1", "nope"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("status of unknown message: %v, want ErrNotFound", err)
		}
		return nil
	})
	var detail string
	if err := e.db.QueryRow(testCtx(t), `SELECT detail FROM consumer_inbox WHERE consumer_group = 'g1' AND message_id = 'm2'`).Scan(&detail); err != nil || detail != "NO_FINAL_STOCK" {
		t.Fatalf("detail = %q, %v", detail, err)
	}
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		return tx.FinishInbox(ctx, "g1", []ports.InboxResult{{MessageID: "never-claimed", Status: ports.InboxNoop}})
	})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("finishing an unclaimed message: %v, want ErrNotFound", err)
	}
}

// A claim rolled back leaves nothing: the message can be claimed again.
func TestInboxClaimRolledBackIsClaimableAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	boom := errors.New("boom")
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		if _, err := tx.ClaimInbox(ctx, "g", entries("m")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got := claim(t, e, "g", entries("m")); !slices.Equal(got, []string{"m"}) {
		t.Fatalf("claim after rollback = %v", got)
	}
}

// 100 concurrent transactions claiming the same message: exactly one
// claims it, the others wait for it and then see it taken.
func TestInboxConcurrentClaimsOfOneMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{MaxConns: 20})
	const n = 100
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners int
	)
	for range n {
		wg.Go(func() {
			err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
				got, err := tx.ClaimInbox(ctx, "g", entries("hot", "other"))
				if err != nil {
					return err
				}
				if slices.Contains(got, "hot") {
					mu.Lock()
					winners++
					mu.Unlock()
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if winners != 1 {
		t.Fatalf("%d transactions claimed the message, want 1", winners)
	}
	if c := e.count(t, `SELECT count(*) FROM consumer_inbox WHERE consumer_group = 'g'`); c != 2 {
		t.Fatalf("%d inbox rows, want 2", c)
	}
	if c := e.metric(t, "inbox_insert_conflict_total"); c != 2*(n-1) {
		t.Fatalf("inbox_insert_conflict_total = %v, want %d", c, 2*(n-1))
	}
}

// Two batches claiming overlapping messages in opposite orders wait for
// each other instead of deadlocking; each message is claimed once.
func TestInboxOverlappingBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{MaxConns: 20})
	ids := []string{"a", "b", "c", "d", "e", "f"}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total []string
	)
	for i := range 20 {
		order := ids
		if i%2 == 1 {
			order = rev
		}
		wg.Go(func() {
			err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
				got, err := tx.ClaimInbox(ctx, "g", entries(order...))
				mu.Lock()
				total = append(total, got...)
				mu.Unlock()
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	slices.Sort(total)
	if !slices.Equal(total, ids) {
		t.Fatalf("claimed %v, want each of %v once", total, ids)
	}
	if d := e.metric(t, "pg_deadlock_total"); d != 0 {
		t.Fatalf("pg_deadlock_total = %v", d)
	}
}
