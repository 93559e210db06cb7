package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

func rejection(orderID string) ports.Rejection {
	return ports.Rejection{OrderID: orderID, ReservationID: newID("rsv"), MessageID: newID("evt"),
		ActivityID: 1, SKUID: 1, UserID: 7, Reason: "NO_FINAL_STOCK", RejectedAt: time.Now()}
}

// A constraint checked at COMMIT makes InTx fail with that error; nothing
// is stored.
func TestInTxReturnsCommitError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	ctx := testCtx(t)
	if _, err := e.db.Exec(ctx, `ALTER TABLE order_rejections ADD CONSTRAINT test_rejection_order_fk
		FOREIGN KEY (order_id) REFERENCES orders (order_id) DEFERRABLE INITIALLY DEFERRED`); err != nil {
		t.Fatal(err)
	}
	orderID := newID("ord")
	err := e.store.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		return tx.RecordRejections(ctx, []ports.Rejection{rejection(orderID)})
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Fatalf("InTx = %v, want the deferred foreign key violation (23503) from COMMIT", err)
	}
	if n := e.count(t, `SELECT count(*) FROM order_rejections WHERE order_id = $1`, orderID); n != 0 {
		t.Fatalf("%d rows stored after a failed commit", n)
	}
}

// A transaction aborted by an error that fn swallowed cannot commit: InTx
// reports it instead of a silent rollback.
func TestInTxReportsCommitOfAbortedTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	entry := ports.LedgerEntry{ActivityID: 1, SKUID: 1, Delta: -1, Reason: ports.LedgerOrderCreated,
		OrderID: "o", ReservationID: newID("rsv"), MessageID: "m"}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendLedger(ctx, []ports.LedgerEntry{entry}) })
	orderID := newID("ord")
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		if err := tx.RecordRejections(ctx, []ports.Rejection{rejection(orderID)}); err != nil {
			return err
		}
		_ = tx.AppendLedger(ctx, []ports.LedgerEntry{entry}) // fails and aborts; error ignored
		return nil
	})
	if err == nil {
		t.Fatal("InTx committed a transaction that PostgreSQL aborted")
	}
	if n := e.count(t, `SELECT count(*) FROM order_rejections WHERE order_id = $1`, orderID); n != 0 {
		t.Fatalf("%d rows stored", n)
	}
}

// fn's error rolls back and is returned as is.
func TestInTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	boom := errors.New("boom")
	orderID := newID("ord")
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		if err := tx.RecordRejections(ctx, []ports.Rejection{rejection(orderID)}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	if n := e.count(t, `SELECT count(*) FROM order_rejections WHERE order_id = $1`, orderID); n != 0 {
		t.Fatalf("%d rows stored after a rollback", n)
	}
	if got := e.metric(t, "order_tx_latency_seconds"); got != 1 {
		t.Fatalf("order_tx_latency_seconds observed %v transactions, want 1", got)
	}
}

// A panic in fn rolls back, releases the connection and is re-raised.
func TestInTxRollsBackAndRepanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	orderID := newID("ord")
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the original panic value", p)
			}
		}()
		_ = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			if err := tx.RecordRejections(ctx, []ports.Rejection{rejection(orderID)}); err != nil {
				t.Error(err)
			}
			panic("boom")
		})
	}()
	if n := e.count(t, `SELECT count(*) FROM order_rejections WHERE order_id = $1`, orderID); n != 0 {
		t.Fatalf("%d rows stored after a panic", n)
	}
	if got := e.metric(t, "pg_pool_acquired"); got != 0 {
		t.Fatalf("pg_pool_acquired = %v after the panic, want 0", got)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.RecordRejections(ctx, []ports.Rejection{rejection(orderID)})
	})
	if n := e.count(t, `SELECT count(*) FROM order_rejections WHERE order_id = $1`, orderID); n != 1 {
		t.Fatalf("store unusable after a panic: %d rows", n)
	}
}

// A backend terminated in the middle of a transaction yields ErrTransient,
// with the driver's error still reachable.
func TestInTxTerminatedBackendIsTransient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{ApplicationName: "seckill-terminate-test"})
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		if _, err := tx.Now(ctx); err != nil {
			return err
		}
		var terminated bool
		if err := e.db.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'seckill-terminate-test'
			  AND state LIKE 'idle in transaction%'`).Scan(&terminated); err != nil || !terminated {
			t.Fatalf("terminate backend: %v %v", terminated, err)
		}
		_, err := tx.ClaimInbox(ctx, "g", []ports.InboxEntry{{MessageID: "m1", Topic: "t"}})
		return err
	})
	mustBeTransient(t, err)
	// The pool replaces the dead connection.
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { _, err := tx.Now(ctx); return err })
}

// Two transactions locking two stock rows in opposite order deadlock; the
// victim gets ErrTransient and pg_deadlock_total counts it.
func TestDeadlockIsTransientAndCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{StockBuckets: 1})
	a1, a2 := createActivity(t, e, 10), createActivity(t, e, 10)
	var (
		wg       sync.WaitGroup
		both     sync.WaitGroup
		errs     [2]error
		activity = [2][2]int64{{a1, a2}, {a2, a1}}
	)
	both.Add(2)
	for i := range 2 {
		wg.Go(func() {
			errs[i] = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
				_, err := tx.TakeStock(ctx, activity[i][0], 1, 1)
				both.Done()
				if err != nil {
					return err
				}
				both.Wait()
				_, err = tx.TakeStock(ctx, activity[i][1], 1, 1)
				return err
			})
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			mustBeTransient(t, err)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
				t.Fatalf("error %v is not a deadlock", err)
			}
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d transactions failed, want exactly one deadlock victim: %v", failed, errs)
	}
	if got := e.metric(t, "pg_deadlock_total"); got != 1 {
		t.Fatalf("pg_deadlock_total = %v, want 1", got)
	}
}

// Now is the transaction timestamp: constant within a transaction, UTC,
// and not earlier in a later transaction.
func TestNowIsTransactionTimestamp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	var first time.Time
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		n1, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
		n2, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if !n1.Equal(n2) || n1.Location() != time.UTC {
			t.Errorf("Now = %v then %v, want one UTC transaction timestamp", n1, n2)
		}
		first = n1
		return nil
	})
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		n, err := tx.Now(ctx)
		if err == nil && n.Before(first) {
			t.Errorf("later transaction's Now %v before %v", n, first)
		}
		return err
	})
}

// A Tx used after its callback returned fails instead of touching another
// transaction.
func TestTxUnusableAfterCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	var kept ports.Tx
	e.inTx(t, func(_ context.Context, tx ports.Tx) error { kept = tx; return nil })
	if _, err := kept.ClaimInbox(testCtx(t), "g", []ports.InboxEntry{{MessageID: "m", Topic: "t"}}); err == nil {
		t.Fatal("ClaimInbox on a finished transaction succeeded")
	}
	if got := e.metric(t, "order_tx_latency_seconds"); got != 1 {
		t.Fatalf("order_tx_latency_seconds observed %v transactions, want 1", got)
	}
	if got := e.metric(t, "pg_pool_wait_seconds"); got < 1 {
		t.Fatalf("pg_pool_wait_seconds observed %v acquires", got)
	}
	if got := e.metric(t, "pg_active_connections"); got < 1 {
		t.Fatalf("pg_active_connections = %v", got)
	}
}
