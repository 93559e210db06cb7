package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

// stockActivity creates activity 1 SKU sku with stock units over several
// stock buckets.
func stockActivity(t *testing.T, e *env, sku, stock int64) ports.Activity {
	t.Helper()
	now := time.Now().UTC()
	a := ports.Activity{ActivityID: 1, SKUID: sku, Stock: stock, StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.CreateActivity(ctx, a)
		return err
	})
	return a
}

// stockTerms reads the initial stock, the final stock and the audit terms
// of activity 1 SKU sku.
func (e *env) stockTerms(t *testing.T, sku int64) (initial, final int64) {
	t.Helper()
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		a, err := tx.AuditStock(ctx, 1, sku, nil)
		initial, final = a.InitialStock, a.PGFinalStock
		return err
	})
	return initial, final
}

// TestStockChangeRecordsApplyOnce: a change is recorded PENDING once per
// request id (a second begin returns the stored one), applied once (the
// initial and the final stock move by its delta, the row keeps the stock
// before and after) and never again; a removal moves both stocks down; a
// refused removal changes neither; an unknown SKU is ErrNotFound.
func TestStockChangeRecordsApplyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{StockBuckets: 4})
	stockActivity(t, e, 1, 10)
	add := ports.StockChangeRecord{RequestID: "add-5", ActivityID: 1, SKUID: 1, Delta: 5, Actor: "user:7"}
	var begun, again ports.StockChangeRecord
	var created, createdAgain bool
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if begun, created, err = tx.BeginStockChange(ctx, add); err != nil {
			return err
		}
		again, createdAgain, err = tx.BeginStockChange(ctx, ports.StockChangeRecord{RequestID: "add-5", ActivityID: 1, SKUID: 1, Delta: -2, Actor: "user:8"})
		return err
	})
	if !created || createdAgain || begun.Status != ports.StockChangePending || begun.Actor != "user:7" || begun.CreatedAt.IsZero() {
		t.Fatalf("begin = %+v created %v, again created %v; want one PENDING row", begun, created, createdAgain)
	}
	if !again.Same(add) || again.Same(ports.StockChangeRecord{ActivityID: 1, SKUID: 1, Delta: -2}) {
		t.Fatalf("the stored change %+v does not compare as the first one", again)
	}
	var applied ports.StockChangeRecord
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if _, err := tx.LockStockChange(ctx, "add-5"); err != nil {
			return err
		}
		var err error
		applied, err = tx.ApplyStockChange(ctx, "add-5", 15)
		return err
	})
	if applied.Status != ports.StockChangeApplied || applied.StockBefore != 10 || applied.StockAfter != 15 ||
		applied.Available != 15 || applied.AppliedAt.IsZero() {
		t.Fatalf("applied = %+v, want APPLIED 10 -> 15, 15 available", applied)
	}
	if initial, final := e.stockTerms(t, 1); initial != 15 || final != 15 {
		t.Fatalf("after +5: initial %d final %d, want 15 and 15", initial, final)
	}
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		_, err := tx.ApplyStockChange(ctx, "add-5", 15)
		return err
	})
	if !errors.Is(err, ports.ErrActivityState) {
		t.Fatalf("applying twice: %v, want ErrActivityState", err)
	}
	if initial, _ := e.stockTerms(t, 1); initial != 15 {
		t.Fatalf("initial stock after a second apply = %d, want 15", initial)
	}

	// A removal of 12 from 15 takes units from several buckets.
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.BeginStockChange(ctx, ports.StockChangeRecord{RequestID: "cut-12", ActivityID: 1, SKUID: 1, Delta: -12, Actor: "user:7"}); err != nil {
			return err
		}
		_, err := tx.ApplyStockChange(ctx, "cut-12", 3)
		return err
	})
	if initial, final := e.stockTerms(t, 1); initial != 3 || final != 3 {
		t.Fatalf("after -12: initial %d final %d, want 3 and 3", initial, final)
	}
	// One of more than the final stock fails and the transaction rolls back.
	err = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.BeginStockChange(ctx, ports.StockChangeRecord{RequestID: "cut-4", ActivityID: 1, SKUID: 1, Delta: -4, Actor: "user:7"}); err != nil {
			return err
		}
		_, err := tx.ApplyStockChange(ctx, "cut-4", 0)
		return err
	})
	if err == nil {
		t.Fatal("removing 4 of a final stock of 3 succeeded")
	}
	var refused ports.StockChangeRecord
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.BeginStockChange(ctx, ports.StockChangeRecord{RequestID: "cut-4", ActivityID: 1, SKUID: 1, Delta: -4, Actor: "user:7"}); err != nil {
			return err
		}
		var err error
		refused, err = tx.RefuseStockChange(ctx, "cut-4", 3)
		return err
	})
	if refused.Status != ports.StockChangeRefused || refused.Available != 3 || refused.AppliedAt.IsZero() {
		t.Fatalf("refused = %+v, want REFUSED with 3 removable", refused)
	}
	if initial, final := e.stockTerms(t, 1); initial != 3 || final != 3 {
		t.Fatalf("after the refusal: initial %d final %d, want 3 and 3", initial, final)
	}
	err = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.BeginStockChange(ctx, ports.StockChangeRecord{RequestID: "x", ActivityID: 9, SKUID: 9, Delta: 1, Actor: "user:7"})
		return err
	})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("begin on an unknown SKU: %v, want ErrNotFound", err)
	}
}

// TestPendingStockChanges: the worker's list holds PENDING changes older
// than its bound, oldest first; the per-SKU lock returns a SKU's PENDING
// request ids and makes a concurrent apply wait until it ends, after
// which the change applies; HasPendingStockChanges follows.
func TestPendingStockChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	stockActivity(t, e, 1, 10)
	stockActivity(t, e, 2, 10)
	for _, c := range []ports.StockChangeRecord{
		{RequestID: "b", ActivityID: 1, SKUID: 1, Delta: 1, Actor: "user:1"},
		{RequestID: "a", ActivityID: 1, SKUID: 1, Delta: 2, Actor: "user:1"},
		{RequestID: "c", ActivityID: 1, SKUID: 2, Delta: 3, Actor: "user:1"},
	} {
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
			_, _, err := tx.BeginStockChange(ctx, c)
			return err
		})
	}
	var pending []ports.StockChangeRecord
	var has1, has2 bool
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if pending, err = tx.PendingStockChanges(ctx, time.Now().Add(time.Hour), 10); err != nil {
			return err
		}
		if has1, err = tx.HasPendingStockChanges(ctx, 1, 1); err != nil {
			return err
		}
		has2, err = tx.HasPendingStockChanges(ctx, 1, 3)
		return err
	})
	var ids []string
	for _, p := range pending {
		ids = append(ids, p.RequestID)
	}
	if !slices.Equal(ids, []string{"b", "a", "c"}) || !has1 || has2 {
		t.Fatalf("pending = %v, has 1/1 %v, has 1/3 %v; want [b a c], true, false", ids, has1, has2)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		pending, err = tx.PendingStockChanges(ctx, time.Now().Add(-time.Hour), 10)
		return err
	})
	if len(pending) != 0 {
		t.Fatalf("pending older than an hour = %d, want none", len(pending))
	}

	locked := make(chan struct{})
	release := make(chan struct{})
	unlock := sync.OnceFunc(func() { close(release) })
	defer unlock() // also when the test fails while the lock is held
	var wg sync.WaitGroup
	var lockedIDs []string
	var lockErr error
	wg.Go(func() {
		lockErr = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			var err error
			if lockedIDs, err = tx.LockPendingStockChanges(ctx, 1, 1); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	})
	<-locked
	applied := make(chan error, 1)
	go func() {
		applied <- e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			if _, err := tx.LockStockChange(ctx, "a"); err != nil {
				return err
			}
			_, err := tx.ApplyStockChange(ctx, "a", 12)
			return err
		})
	}()
	// The apply waits for the lock (a backend of this database waits on a
	// lock, and the apply has not returned).
	waiting := false
	for range 250 {
		if e.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0 {
			waiting = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-applied:
		t.Fatalf("the apply returned (%v) while the SKU's pending changes were locked", err)
	default:
	}
	if !waiting {
		t.Fatal("no backend waited for the locked change")
	}
	unlock()
	wg.Wait()
	if err := <-applied; err != nil {
		t.Fatalf("apply after the lock: %v", err)
	}
	if lockErr != nil || !slices.Equal(lockedIDs, []string{"a", "b"}) {
		t.Fatalf("locked %v, %v; want [a b]", lockedIDs, lockErr)
	}
	if initial, _ := e.stockTerms(t, 1); initial != 12 {
		t.Fatalf("initial stock = %d, want 12", initial)
	}
}
