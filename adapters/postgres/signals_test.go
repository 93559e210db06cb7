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
// more with its wait.
func TestPoolStatsCountAnExhaustedPool(t *testing.T) {
	e := newEnv(t, postgres.Config{MaxConns: 2})
	before := e.store.PoolStats()
	if before.Max != 2 {
		t.Fatalf("max conns %d, want 2", before.Max)
	}
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
	if st := e.store.PoolStats(); st.Acquired != 2 || st.Total != 2 {
		t.Fatalf("with both connections held: %+v", st)
	}
	waited := make(chan error, 1)
	go func() {
		waited <- e.store.InTx(testCtx(t), func(context.Context, ports.Tx) error { return nil })
	}()
	time.Sleep(50 * time.Millisecond) // let the third acquire queue behind the held ones
	close(release)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	after := e.store.PoolStats()
	if after.Acquires-before.Acquires < 3 {
		t.Errorf("acquires %d -> %d, want at least 3 more", before.Acquires, after.Acquires)
	}
	if after.EmptyAcquires <= before.EmptyAcquires || after.EmptyAcquireWait <= before.EmptyAcquireWait {
		t.Errorf("no empty acquire counted for the queued transaction: %+v -> %+v", before, after)
	}
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
