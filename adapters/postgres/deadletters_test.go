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

func deadLetter(group, messageID string) ports.DeadLetterRecord {
	return ports.DeadLetterRecord{
		ConsumerGroup: group, Topic: ports.TopicOrderStateFIFO, MessageID: messageID, BrokerMessageID: newID("brk"),
		Tag: "ORDER_STATE", Keys: []string{"ord-1", "rsv-1"}, MessageGroup: "ord-1",
		ErrorClass: "RETRIES_EXHAUSTED", LastError: "not acknowledged after 16 deliveries", Attempts: 16,
		Body: []byte(`{"x":1}`), Properties: map[string]string{"message_id": messageID},
	}
}

func recordDeadLetter(t *testing.T, e *env, r ports.DeadLetterRecord) int64 {
	t.Helper()
	var id int64
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		id, _, err = tx.RecordDeadLetter(ctx, r)
		return err
	})
	return id
}

// errHoldRollback ends a held transaction with a rollback.
var errHoldRollback = errors.New("held transaction rolled back")

// holdTx runs fn in a transaction on a goroutine of its own and keeps the
// transaction open after fn returned, until end is called: end(true)
// commits, end(false) rolls back; end returns InTx's error. The test's
// cleanup rolls back a transaction still held, so the goroutine always
// ends.
func holdTx(t *testing.T, e *env, fn func(ctx context.Context, tx ports.Tx) error) (end func(commit bool) error) {
	t.Helper()
	ready := make(chan error, 1)
	release := make(chan bool, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			err := fn(ctx, tx)
			ready <- err
			if err != nil {
				return err
			}
			if !<-release {
				return errHoldRollback
			}
			return nil
		})
	}()
	if err := <-ready; err != nil {
		if derr := <-done; derr != nil {
			t.Logf("held transaction ended with: %v", derr)
		}
		t.Fatalf("held transaction: %v", err)
	}
	var (
		once   sync.Once
		result error
	)
	end = func(commit bool) error {
		once.Do(func() {
			release <- commit
			result = <-done
		})
		return result
	}
	t.Cleanup(func() { _ = end(false) })
	return end
}

// async runs fn in a transaction on a goroutine of its own; wait returns
// InTx's error.
func async(t *testing.T, e *env, fn func(ctx context.Context, tx ports.Tx) error) (wait func() error) {
	done := make(chan error, 1)
	go func() { done <- e.store.InTx(testCtx(t), fn) }()
	var (
		once   sync.Once
		result error
	)
	wait = func() error {
		once.Do(func() { result = <-done })
		return result
	}
	t.Cleanup(func() { _ = wait() })
	return wait
}

// waitForLockWait returns once a backend of the test's database waits for
// a lock while running a statement containing marker.
func (e *env) waitForLockWait(t *testing.T, marker string) {
	t.Helper()
	ctx := testCtx(t)
	for {
		var n int64
		err := e.db.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
			  AND wait_event_type = 'Lock' AND strpos(query, $1) > 0`, marker).Scan(&n)
		if err != nil {
			t.Fatalf("waiting for a lock wait on %q: %v", marker, err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no statement %q waited for a lock", marker)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// The stored columns: logical topic, tag, keys, message group, properties.
func TestDeadLetterColumns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	r := deadLetter("CG_STATE", newID("evt"))
	id := recordDeadLetter(t, e, r)
	var (
		topic, tag, group, msgID string
		keys                     []string
		props                    map[string]string
	)
	if err := e.db.QueryRow(testCtx(t), `
		SELECT topic, tag, keys, message_group, properties, message_id FROM dead_letters WHERE id = $1`, id).
		Scan(&topic, &tag, &keys, &group, &props, &msgID); err != nil {
		t.Fatal(err)
	}
	if topic != "ORDER_STATE_FIFO" || tag != r.Tag || !slices.Equal(keys, r.Keys) || group != r.MessageGroup ||
		props["message_id"] != r.MessageID || msgID != r.MessageID {
		t.Fatalf("stored topic %q tag %q keys %v group %q props %v message %q; want those of %+v", topic, tag, keys, group, props, msgID, r)
	}
}

// GetDeadLetter locks the row: a second GetDeadLetter (another replay)
// waits until the first transaction commits and then reads its result.
func TestGetDeadLetterLocksUntilCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	id := recordDeadLetter(t, e, deadLetter("CG_A", newID("evt")))
	end := holdTx(t, e, func(ctx context.Context, tx ports.Tx) error {
		if _, err := tx.GetDeadLetter(ctx, id); err != nil {
			return err
		}
		_, err := tx.MarkReplayed(ctx, id)
		return err
	})
	var (
		seen    ports.StoredDeadLetter
		counted int32
	)
	wait := async(t, e, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if seen, err = tx.GetDeadLetter(ctx, id); err != nil {
			return err
		}
		counted, err = tx.MarkReplayed(ctx, id)
		return err
	})
	e.waitForLockWait(t, "FROM dead_letters WHERE id")
	if err := end(true); err != nil {
		t.Fatalf("first replay: %v", err)
	}
	if err := wait(); err != nil {
		t.Fatalf("second replay: %v", err)
	}
	if seen.ReplayCount != 1 || seen.Status != "REPLAYED" || counted != 2 {
		t.Fatalf("second replay read count %d status %s and counted %d; want 1, REPLAYED, 2 (after the first committed)",
			seen.ReplayCount, seen.Status, counted)
	}
}

// A first arrival that a concurrent transaction is inserting makes
// RecordDeadLetter wait: after a commit it updates (or, for the same
// broker message, leaves) that row; after a rollback it creates its own.
func TestRecordDeadLetterWaitsForConcurrentFirstArrival(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                   string
		commit, sameBroker     bool
		wantCreated            bool
		wantClass              string
		wantAttempts, wantRows int64
	}{
		{name: "commit", commit: true, wantClass: "HANDLER_ERROR", wantAttempts: 20, wantRows: 1},
		{name: "commit same broker message", commit: true, sameBroker: true, wantClass: "RETRIES_EXHAUSTED", wantAttempts: 16, wantRows: 1},
		{name: "rollback", wantCreated: true, wantClass: "HANDLER_ERROR", wantAttempts: 20, wantRows: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, postgres.Config{})
			first := deadLetter("CG_A", newID("evt"))
			var firstID int64
			end := holdTx(t, e, func(ctx context.Context, tx ports.Tx) error {
				var err error
				firstID, _, err = tx.RecordDeadLetter(ctx, first)
				return err
			})
			second := deadLetter(first.ConsumerGroup, first.MessageID)
			second.ErrorClass, second.Attempts = "HANDLER_ERROR", 20
			if c.sameBroker {
				second.BrokerMessageID = first.BrokerMessageID
			}
			var (
				id      int64
				created bool
			)
			wait := async(t, e, func(ctx context.Context, tx ports.Tx) error {
				var err error
				id, created, err = tx.RecordDeadLetter(ctx, second)
				return err
			})
			e.waitForLockWait(t, "INSERT INTO dead_letters")
			if err := end(c.commit); c.commit && err != nil {
				t.Fatalf("first arrival: %v", err)
			}
			if err := wait(); err != nil {
				t.Fatalf("second arrival: %v", err)
			}
			if created != c.wantCreated || (c.commit && id != firstID) {
				t.Fatalf("second arrival = (%d, %v); want created %v (first id %d)", id, created, c.wantCreated, firstID)
			}
			var (
				class    string
				attempts int64
			)
			if err := e.db.QueryRow(testCtx(t), `SELECT error_class, attempts FROM dead_letters WHERE id = $1`, id).
				Scan(&class, &attempts); err != nil {
				t.Fatal(err)
			}
			if class != c.wantClass || attempts != c.wantAttempts {
				t.Fatalf("stored class %s attempts %d, want %s %d", class, attempts, c.wantClass, c.wantAttempts)
			}
			if n := e.count(t, `SELECT count(*) FROM dead_letters`); n != c.wantRows {
				t.Fatalf("%d rows, want %d", n, c.wantRows)
			}
		})
	}
}
