package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

// fakeClock is a settable ports.Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// With Config.Clock set, every "now" of a transaction is the clock's
// reading at its start: Tx.Now, the outbox's availability (so a deferred
// row becomes due when the clock, not the database, reaches it) and
// publication time, the inbox's and the outcomes' times, a dead letter's
// sighting and the audit time. The clock is years away from the
// database's, so a now() left anywhere would show.
func TestConfiguredClockIsTheOnlyNow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2001, 2, 3, 4, 5, 6, 789_123_456, time.UTC)
	want := t0.Truncate(time.Microsecond)
	clock := &fakeClock{now: t0}
	e := newEnv(t, postgres.Config{Clock: clock})

	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if !now.Equal(want) {
			t.Errorf("Tx.Now = %v, want the clock's %v", now, want)
		}
		clock.advance(time.Hour) // read once, at the start
		if again, err := tx.Now(ctx); err != nil || !again.Equal(want) {
			t.Errorf("Tx.Now later in the transaction = %v, %v; want %v", again, err, want)
		}
		if err := tx.AppendOutbox(ctx, []ports.OutboundMessage{outMsg("m-clock", "")}); err != nil {
			return err
		}
		if _, err := tx.ClaimInbox(ctx, "g", []ports.InboxEntry{{MessageID: "m-in", Topic: "T"}}); err != nil {
			return err
		}
		if err := tx.FinishInbox(ctx, "g", []ports.InboxResult{{MessageID: "m-in", Status: ports.InboxSucceeded}}); err != nil {
			return err
		}
		if _, err := tx.ClaimReservations(ctx, []ports.ReservationClaim{{ReservationID: "r1", OrderID: "o1", MessageID: "m1"}}); err != nil {
			return err
		}
		if err := tx.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: "r1", Outcome: ports.OutcomeOrdered}}); err != nil {
			return err
		}
		if _, _, err := tx.RecordDeadLetter(ctx, ports.DeadLetterRecord{ConsumerGroup: "g", Topic: "T",
			MessageID: "m-dl", BrokerMessageID: "b1", ErrorClass: "X", Attempts: 1}); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, ports.AuditEntry{Actor: ports.UserActor(1), Action: ports.AuditReconcile, Outcome: ports.AuditOK})
	})
	for _, q := range []string{
		`SELECT count(*) FROM event_outbox WHERE created_at = $1 AND available_at = $1`,
		`SELECT count(*) FROM consumer_inbox WHERE received_at = $1 AND created_at = $1 AND updated_at = $1`,
		`SELECT count(*) FROM reservation_outcomes WHERE created_at = $1 AND updated_at = $1`,
		`SELECT count(*) FROM dead_letters WHERE first_seen_at = $1 AND last_seen_at = $1`,
		`SELECT count(*) FROM admin_audit WHERE at = $1`,
	} {
		if n := e.count(t, q, want); n != 1 {
			t.Errorf("%s: %d rows, want 1", q, n)
		}
	}

	// The clock moved an hour since the transaction began: the row is due.
	// Deferred by a minute, it is not due until the clock gets there.
	waitFence(t, e)
	recs := claimOnce(t, e, 10, false)
	if len(recs) != 1 {
		t.Fatalf("claimed %d rows at the clock's now, want the one appended", len(recs))
	}
	next := clock.Now().Add(time.Minute)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.DeferOutbox(ctx, []int64{recs[0].ID}, next, "later")
	})
	if got := claimOnce(t, e, 10, false); len(got) != 0 {
		t.Fatalf("claimed %d rows before the clock reached their availability", len(got))
	}
	clock.advance(time.Minute)
	if got := claimOnce(t, e, 10, true); len(got) != 1 {
		t.Fatalf("claimed %d rows once the clock reached their availability, want 1", len(got))
	}
	if n := e.count(t, `SELECT count(*) FROM event_outbox WHERE published_at = $1`, next.Truncate(time.Microsecond)); n != 1 {
		t.Fatalf("published_at is not the clock's now")
	}
}

// Without Config.Clock the database's clock is used, as in production.
func TestDefaultNowIsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	var now time.Time
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		if err := tx.AppendOutbox(ctx, []ports.OutboundMessage{outMsg("m-db", "")}); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, ports.AuditEntry{Actor: ports.UserActor(1), Action: ports.AuditReconcile, Outcome: ports.AuditOK})
	})
	if n := e.count(t, `SELECT count(*) FROM event_outbox WHERE available_at = $1 AND created_at = $1`, now); n != 1 {
		t.Fatalf("the outbox row's times are not the transaction's now() %v", now)
	}
	if n := e.count(t, `SELECT count(*) FROM admin_audit WHERE at = $1`, now); n != 1 {
		t.Fatalf("the audit time is not the transaction's now() %v", now)
	}
}

// waitFence waits until no transaction older than the outbox's rows is in
// flight anywhere in the instance (another test's, say), so that a claim
// sees every committed row that is due.
func waitFence(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.count(t, `SELECT count(*) FROM event_outbox WHERE txid >= pg_snapshot_xmin(pg_current_snapshot())`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the outbox fence did not pass")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
