package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

func newStore(t *testing.T) (*memory.Store, *memory.Clock) {
	t.Helper()
	c := memory.NewClock(start)
	return memory.NewStore(c), c
}

func claimInbox(ctx context.Context, tx ports.Tx, ids ...string) ([]string, error) {
	var entries []ports.InboxEntry
	for _, id := range ids {
		entries = append(entries, ports.InboxEntry{MessageID: id, Topic: "ORDER_CREATE"})
	}
	return tx.ClaimInbox(ctx, "g", entries)
}

func TestStoreFailNextCommitRollsBack(t *testing.T) {
	s, _ := newStore(t)
	boom := fmt.Errorf("%w: connection reset", ports.ErrTransient)
	s.FailNextCommit(boom)
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		_, err := claimInbox(ctx, tx, "m1")
		return err
	})
	if !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("InTx = %v, want the injected transient commit error", err)
	}
	if n := len(s.Snapshot().Inbox); n != 0 {
		t.Fatalf("%d inbox rows after a failed commit, want 0", n)
	}
	// One-shot: the next transaction commits.
	if err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		_, err := claimInbox(ctx, tx, "m1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Snapshot().Inbox); n != 1 {
		t.Fatalf("%d inbox rows, want 1", n)
	}
}

func TestStoreLoseNextCommitAckCommits(t *testing.T) {
	s, _ := newStore(t)
	s.LoseNextCommitAck(ports.ErrTransient)
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		_, err := claimInbox(ctx, tx, "m1")
		return err
	})
	if !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("InTx = %v, want the injected error", err)
	}
	if snap := s.Snapshot(); len(snap.Inbox) != 1 || snap.Inbox[0].Status != "PROCESSING" {
		t.Fatalf("inbox after a lost commit ack = %+v, want the committed PROCESSING row", snap.Inbox)
	}
}

func TestStoreFailOnMethod(t *testing.T) {
	s, _ := newStore(t)
	s.FailOn("TakeStock", ports.ErrTransient)
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		_, err := tx.TakeStock(ctx, 1, 1, 1)
		return err
	})
	if !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("TakeStock with a fault = %v, want ErrTransient", err)
	}
	s.FailOn("TakeStock", nil)
	err = s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		_, err := tx.TakeStock(ctx, 1, 1, 1)
		return err
	})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("TakeStock of an unknown SKU after clearing = %v, want ErrNotFound", err)
	}
}

func TestStoreAfterEffectFault(t *testing.T) {
	s, _ := newStore(t)
	s.Inject("ClaimInbox", memory.Fault{Err: ports.ErrTransient, AfterEffect: true, Times: 1})
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		if _, err := claimInbox(ctx, tx, "m1"); !errors.Is(err, ports.ErrTransient) {
			return fmt.Errorf("first claim: %v, want the injected error", err)
		}
		got, err := claimInbox(ctx, tx, "m1")
		if err != nil || len(got) != 0 {
			return fmt.Errorf("second claim = %v, %v; want nothing (the first took effect)", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreInjectUnknownMethodPanics(t *testing.T) {
	s, _ := newStore(t)
	defer func() {
		if recover() == nil {
			t.Fatal("Inject of an unknown method did not panic")
		}
	}()
	s.FailOn("ClaimInboxx", ports.ErrTransient)
}

func TestStoreNestedInTxFails(t *testing.T) {
	s, _ := newStore(t)
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		return s.InTx(ctx, func(context.Context, ports.Tx) error { return nil })
	})
	if err == nil {
		t.Fatal("nested InTx succeeded, want an error instead of a deadlock")
	}
}

func TestStoreTxUnusableAfterInTx(t *testing.T) {
	s, _ := newStore(t)
	var leaked ports.Tx
	if err := s.InTx(t.Context(), func(_ context.Context, tx ports.Tx) error { leaked = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := claimInbox(t.Context(), leaked, "m1"); err == nil {
		t.Fatal("a Tx used after InTx returned succeeded")
	}
}

func TestStoreNowFixedAtBegin(t *testing.T) {
	s, clock := newStore(t)
	clock.Set(start.Add(1500 * time.Nanosecond))
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		before, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		clock.Advance(time.Hour)
		after, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if want := start.Add(time.Microsecond); !before.Equal(want) || !after.Equal(want) {
			return fmt.Errorf("Now = %v then %v, want %v (begin time, microseconds)", before, after, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreWaitsForRunningTransaction(t *testing.T) {
	s, _ := newStore(t)
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(context.Background(), func(ctx context.Context, tx ports.Tx) error {
			close(entered)
			<-release
			_, err := claimInbox(ctx, tx, "m1")
			return err
		})
	}()
	<-entered
	// Readers see committed state without waiting.
	if _, err := s.GetOrderView(t.Context(), "ord_x"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("GetOrderView during a transaction = %v, want ErrNotFound", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.InTx(ctx, func(context.Context, ports.Tx) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("InTx with a canceled context while another runs = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStoreOutboxFIFOGroupOrder(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	msg := func(id, group string) ports.OutboundMessage {
		return ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: id, MessageGroup: group, Body: []byte("{}")}
	}
	if err := s.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		return tx.AppendOutbox(ctx, []ports.OutboundMessage{msg("a1", "A"), msg("b1", "B"), msg("a2", "A")})
	}); err != nil {
		t.Fatal(err)
	}
	claim := func() []string {
		t.Helper()
		var ids []string
		if err := s.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			recs, err := tx.ClaimOutbox(ctx, 10)
			for _, r := range recs {
				ids = append(ids, r.Message.MessageID)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if err := s.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		now, _ := tx.Now(ctx)
		return tx.DeferOutbox(ctx, []int64{1}, now.Add(time.Minute), "x")
	}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(claim()); got != "[b1]" {
		t.Fatalf("claimed %s while a1 is deferred, want [b1] (a2 waits for a1)", got)
	}
}

func TestStoreSnapshot(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	o, err := order.Create(order.NewOrder{
		OrderID: "ord_1", ReservationID: "rsv_1", MessageID: "evt_1", ActivityID: 1, SKUID: 2, UserID: 3,
		Quantity: 1, ReservedAt: start, PaymentTimeout: time.Minute,
	}, start)
	if err != nil {
		t.Fatal(err)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.CreateActivity(ctx, ports.Activity{ActivityID: 1, SKUID: 2, Stock: 5,
			StartsAt: start, EndsAt: start.Add(time.Hour), PaymentTimeout: time.Minute, ReservationTTL: time.Minute}); err != nil {
			return err
		}
		if _, err := tx.TakeStock(ctx, 1, 2, 1); err != nil {
			return err
		}
		if _, err := tx.InsertOrders(ctx, []order.Snapshot{o.Snapshot()}); err != nil {
			return err
		}
		if err := tx.AppendEvents(ctx, o.Changes()); err != nil {
			return err
		}
		rs := tx.(ports.ReservationOutcomeStore)
		if _, err := rs.ClaimReservations(ctx, []ports.ReservationClaim{{ReservationID: "rsv_1"}}); err != nil {
			return err
		}
		return rs.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: "rsv_1", Outcome: ports.OutcomeOrdered}})
	})
	if err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	switch {
	case len(snap.Orders) != 1 || snap.Orders[0].OrderID != "ord_1":
		t.Fatalf("orders %+v", snap.Orders)
	case len(snap.Events["ord_1"]) != 1:
		t.Fatalf("events %+v", snap.Events)
	case snap.Stock[memory.SKU{ActivityID: 1, SKUID: 2}] != 4:
		t.Fatalf("stock %+v", snap.Stock)
	case len(snap.Outcomes) != 1 || snap.Outcomes[0].Status != ports.OutcomeOrdered:
		t.Fatalf("outcomes %+v", snap.Outcomes)
	case len(snap.Activities) != 1:
		t.Fatalf("activities %+v", snap.Activities)
	}
}

func TestStoreFinishUnclaimedFails(t *testing.T) {
	s, _ := newStore(t)
	err := s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		return tx.FinishInbox(ctx, "g", []ports.InboxResult{{MessageID: "never", Status: ports.InboxSucceeded}})
	})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("FinishInbox of an unclaimed message = %v, want ErrNotFound", err)
	}
	err = s.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		return tx.(ports.ReservationOutcomeStore).FinishReservations(ctx,
			[]ports.ReservationOutcome{{ReservationID: "never", Outcome: ports.OutcomeOrdered}})
	})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("FinishReservations of an unclaimed reservation = %v, want ErrNotFound", err)
	}
}
