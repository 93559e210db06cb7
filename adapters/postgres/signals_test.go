package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

// TestPoolStatsCountAnExhaustedPool: with every connection of the pool
// held by a transaction, one more transaction waits for a connection; the
// snapshot then shows the pool full and, once it got one, an empty acquire
// more with its wait. Nothing tells when the third acquire has queued, so
// the connections are held a little longer on each of up to three tries
// (0.1, 0.5, 2 s); the counters must move on one of them.
func TestPoolStatsCountAnExhaustedPool(t *testing.T) {
	e := newEnv(t, postgres.Config{MaxConns: 2})
	if m := e.store.PoolStats().Max; m != 2 {
		t.Fatalf("max conns %d, want 2", m)
	}
	var before, after postgres.PoolStats
	for _, hold := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second} {
		release := make(chan struct{})
		var held, wg sync.WaitGroup
		held.Add(2)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.store.InTx(testCtx(t), func(context.Context, ports.Tx) error {
					held.Done()
					<-release
					return nil
				})
			}()
		}
		held.Wait()
		// The held ones' acquires are counted: only the third moves the
		// counters from here.
		before = e.store.PoolStats()
		if before.Acquired != 2 || before.Total != 2 {
			close(release)
			t.Fatalf("with both connections held: %+v", before)
		}
		waited := make(chan error, 1)
		go func() {
			waited <- e.store.InTx(testCtx(t), func(context.Context, ports.Tx) error { return nil })
		}()
		time.Sleep(hold) // let the third acquire queue behind the held ones
		close(release)
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		after = e.store.PoolStats()
		if after.Acquires-before.Acquires < 1 {
			t.Fatalf("acquires %d -> %d, want the third one counted", before.Acquires, after.Acquires)
		}
		if after.EmptyAcquires > before.EmptyAcquires && after.EmptyAcquireWait > before.EmptyAcquireWait {
			return
		}
	}
	t.Errorf("no empty acquire counted for the queued transaction in three tries: %+v -> %+v", before, after)
}

// TestLockWaitsCountSessionsBlockedOnARow: two sessions updating a row a
// third one holds locked are counted, and none once the lock is released;
// a canceled context is an error, not a count.
func TestLockWaitsCountSessionsBlockedOnARow(t *testing.T) {
	e := newEnv(t, postgres.Config{})
	ctx := testCtx(t)
	if _, err := e.db.Exec(ctx, `CREATE TABLE lock_probe (id int PRIMARY KEY, v int); INSERT INTO lock_probe VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.LockWaits(ctx); err != nil || n != 0 {
		t.Fatalf("idle database: %d lock waits, %v", n, err)
	}
	holder, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `UPDATE lock_probe SET v = v + 1 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = e.db.Exec(ctx, `UPDATE lock_probe SET v = v + 1 WHERE id = 1`)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := e.store.LockWaits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock waits %d, want 2 sessions blocked on the row", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n, err := e.store.LockWaits(ctx); err != nil || n != 0 {
		t.Fatalf("after the release: %d lock waits, %v", n, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.store.LockWaits(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: %v, want context.Canceled", err)
	}
}
