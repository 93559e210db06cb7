package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/testkit/pgpair"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// TestFailoverToAPromotedStandby: the store runs on a DSN naming the
// primary and its standby with target_session_attrs=read-write (the shape
// docs/operations.md gives for a PostgreSQL pair), on a private pair
// (testkit/pgpair). Orders are committed
// one transaction each; the primary is killed and the standby promoted.
// The store's transactions move to the new primary by themselves (a
// transaction on a dead connection fails as transient and a new
// connection finds the read-write host). What survives is what the
// replication setting promises:
//
//   - synchronous (the default docs/operations.md chooses), the standby
//     streaming, or with its replay paused (lagging): every order whose
//     commit returned is on the new primary;
//   - synchronous with the standby's WAL receiver stopped (then killed
//     with the primary, so what it had not written is gone): a commit does
//     not return (it waits for the standby, and the store's bound ends it
//     with an error), so nothing unacknowledged is promised, and every
//     order whose commit returned before is on the new primary;
//   - asynchronous with the WAL receiver stopped then killed: commits
//     return, and the orders committed after the receiver stopped vanish
//     with the old primary: the loss the synchronous setting exists to
//     prevent.
func TestFailoverToAPromotedStandby(t *testing.T) {
	for _, tc := range []struct {
		name            string
		sync            bool
		pause, receiver bool // pause the standby's replay; stop its WAL receiver
	}{
		{name: "synchronous", sync: true},
		{name: "synchronous, replay paused", sync: true, pause: true},
		{name: "synchronous, receiver stopped", sync: true, receiver: true},
		{name: "asynchronous, receiver stopped", receiver: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failover(t, tc.sync, tc.pause, tc.receiver)
		})
	}
}

func failover(t *testing.T, sync, pause, stopReceiver bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := pgpair.Start(ctx, pgpair.Options{Synchronous: sync})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	dsn := p.URL("postgres")
	m, err := postgres.NewMigrator(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: 4}, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the store on the pair: %v", err)
	}
	t.Cleanup(s.Close)
	insert := func(o *order.Order, bound time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		return s.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			ok, err := tx.InsertOrders(ctx, []order.Snapshot{o.Snapshot()})
			if err == nil && !slices.Equal(ok, []bool{true}) {
				err = fmt.Errorf("order %s not inserted: %v", o.Snapshot().OrderID, ok)
			}
			return err
		})
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var acknowledged []string
	commit := func(user int64) {
		t.Helper()
		o := newOrder(t, 1, 1, user, now)
		if err := insert(o, 5*time.Second); err != nil {
			t.Fatalf("insert order of user %d: %v", user, err)
		}
		acknowledged = append(acknowledged, o.Snapshot().OrderID)
	}
	for user := range int64(10) {
		commit(100 + user)
	}
	if pause {
		var none string
		if err := p.Standby.QueryRow(ctx, `SELECT pg_wal_replay_pause()::text`, &none); err != nil {
			t.Fatalf("pause the standby's replay: %v", err)
		}
	}
	if stopReceiver && !sync {
		// Asynchronous commits return before the standby has their WAL:
		// wait until it received the first ten, so that exactly the ten
		// committed after its receiver stopped are the ones at risk.
		var lsn string
		if err := p.Primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`, &lsn); err != nil {
			t.Fatalf("the primary's WAL position: %v", err)
		}
		eventually(t, "the standby received the first commits", func() bool {
			var received bool
			err := p.Standby.QueryRow(ctx, `SELECT coalesce(pg_last_wal_receive_lsn() >= '`+lsn+`'::pg_lsn, false)`, &received)
			return err == nil && received
		})
	}
	var receiver int
	if stopReceiver {
		if err := p.Standby.QueryRow(ctx, `SELECT pid FROM pg_stat_wal_receiver`, &receiver); err != nil {
			t.Fatalf("the standby's WAL receiver: %v", err)
		}
		if err := syscall.Kill(receiver, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if stopReceiver && sync {
		// The commit waits for a standby that does not answer: it never
		// returns success.
		if err := insert(newOrder(t, 1, 1, 500, now), 2*time.Second); err == nil {
			t.Fatal("a commit returned while the synchronous standby's WAL receiver was stopped")
		}
	} else {
		for user := range int64(10) {
			commit(200 + user)
		}
	}

	p.Primary.Kill()
	if stopReceiver {
		// The receiver dies with what it had not written yet (the WAL
		// still in its socket): a standby that lagged loses what it never
		// got. Its postmaster restarts its processes and recovers.
		_ = syscall.Kill(receiver, syscall.SIGKILL)
	}
	if err := p.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	after := newOrder(t, 1, 1, 999, now)
	attempts := 0
	eventually(t, "a transaction of the store commits on the promoted standby", func() bool {
		attempts++
		err := insert(after, 5*time.Second)
		if err != nil && !errors.Is(err, ports.ErrTransient) {
			t.Fatalf("insert after the failover: %v, want a transient error or success", err)
		}
		return err == nil
	})
	acknowledged = append(acknowledged, after.Snapshot().OrderID)
	found, err := pgxRows(ctx, p.Standby.URL("postgres"), `SELECT order_id FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, id := range acknowledged {
		if !slices.Contains(found, id) {
			lost = append(lost, id)
		}
	}
	t.Logf("%d acknowledged orders, %d on the new primary, %d lost; the store's first commit there came at attempt %d",
		len(acknowledged), len(found), len(lost), attempts)
	if !sync && stopReceiver {
		if len(lost) != 10 {
			t.Fatalf("asynchronous with the receiver stopped: %d acknowledged orders lost, want the 10 committed after it stopped", len(lost))
		}
		return
	}
	if len(lost) > 0 {
		t.Fatalf("%d acknowledged orders vanished in the failover: %v", len(lost), lost)
	}
}

// pgxRows returns the one text column of every row of sql on url.
func pgxRows(ctx context.Context, url, sql string) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// eventually polls cond every 100 ms for at most 60 s (a bound on
// waiting: the failure says what never happened).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened within 60 s: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
