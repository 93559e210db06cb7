package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/migrations"
	"github.com/seckill-dev/seckill/ports"
)

// The stored columns of an audit entry: actor, action, target, params as
// jsonb ('{}' for none), outcome and at = the transaction's now().
func TestAdminAuditColumns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	var now time.Time
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return err
		}
		if err := tx.AppendAudit(ctx, ports.AuditEntry{Actor: "user:7", Action: ports.AuditDLQReplay,
			Target: ports.DeadLetterTarget(42), Outcome: ports.AuditNotFound,
			Params: map[string]any{"reason": "fixed", "replay_count": 2}}); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, ports.AuditEntry{Actor: ports.ActorReconciler, Action: ports.AuditReconcile, Outcome: ports.AuditOK})
	})
	if n := e.count(t, `SELECT count(*) FROM admin_audit
		WHERE actor = 'user:7' AND action = 'DLQ_REPLAY' AND target = 'dead_letter:42' AND outcome = 'NOT_FOUND'
		  AND params = '{"reason": "fixed", "replay_count": 2}'::jsonb AND at = $1`, now); n != 1 {
		t.Fatalf("%d matching replay audit rows, want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM admin_audit
		WHERE actor = 'system:reconciler' AND action = 'RECONCILE' AND target = '' AND params = '{}'::jsonb AND at = $1`, now); n != 1 {
		t.Fatalf("%d matching reconcile audit rows, want 1", n)
	}
}

// An invalid entry fails before any statement: the transaction stays
// usable and commits the rest of its work.
func TestAdminAuditInvalidEntryKeepsTheTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if err := tx.AppendAudit(ctx, ports.AuditEntry{Action: ports.AuditReconcile, Outcome: ports.AuditOK}); err == nil {
			t.Error("an entry without actor was stored")
		}
		return tx.AppendAudit(ctx, ports.AuditEntry{Actor: "user:1", Action: ports.AuditReconcile, Outcome: ports.AuditOK})
	})
	if n := e.count(t, `SELECT count(*) FROM admin_audit`); n != 1 {
		t.Fatalf("%d audit rows, want 1", n)
	}
}

// gooseAt returns a goose provider over a fresh, empty database.
func gooseAt(t *testing.T) (*goose.Provider, string) {
	t.Helper()
	dsn := pgtest.NewEmptyDatabase(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p, dsn
}

// Migration 00013 moves the dead_letter_audit rows into admin_audit (as
// DLQ_REPLAY on dead_letter:<id>, keeping time and order) and drops the old
// table; its Down recreates the old table with the replays of existing dead
// letters and drops admin_audit.
func TestAdminAuditMigrationMovesDeadLetterAudit(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	p, dsn := gooseAt(t)
	if _, err := p.UpTo(ctx, 12); err != nil {
		t.Fatalf("up to 12: %v", err)
	}
	db := pgtest.Pool(t, dsn)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(sql string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	var dl int64
	if err := db.QueryRow(ctx, `
		INSERT INTO dead_letters (consumer_group, topic, message_id, broker_message_id, error_class, body)
		VALUES ('CG_A', 'ORDER_CREATE', 'evt_1', 'brk_1', 'RETRIES_EXHAUSTED', '\x7b7d') RETURNING id`).Scan(&dl); err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 3, 1, 10, 0, 0, 123456000, time.UTC)
	exec(`INSERT INTO dead_letter_audit (dead_letter_id, actor, action, reason, replay_id, outcome, created_at)
		VALUES ($1, 'user:3', 'REPLAY', 'too early replay cap 3 reached', NULL, 'REFUSED', $2),
		       ($1, 'user:4', 'REPLAY', 'fixed', 'rpl_1', 'REPLAYED', $3)`, dl, t1, t1.Add(time.Minute))

	if _, err := p.UpTo(ctx, 13); err != nil {
		t.Fatalf("up to 13: %v", err)
	}
	if n := count(`SELECT count(*) FROM pg_tables WHERE tablename = 'dead_letter_audit'`); n != 0 {
		t.Fatal("dead_letter_audit still exists after 00013")
	}
	target := ports.DeadLetterTarget(dl)
	if n := count(`SELECT count(*) FROM admin_audit`); n != 2 {
		t.Fatalf("%d admin_audit rows, want the 2 moved ones", n)
	}
	if n := count(`SELECT count(*) FROM admin_audit WHERE id = (SELECT min(id) FROM admin_audit)
		AND actor = 'user:3' AND action = 'DLQ_REPLAY' AND target = $1 AND outcome = 'REFUSED'
		AND params = '{"reason": "too early replay cap 3 reached"}'::jsonb AND at = $2`, target, t1); n != 1 {
		t.Fatal("the refused replay did not move as the first DLQ_REPLAY row")
	}
	if n := count(`SELECT count(*) FROM admin_audit WHERE id = (SELECT max(id) FROM admin_audit)
		AND actor = 'user:4' AND action = 'DLQ_REPLAY' AND target = $1 AND outcome = 'REPLAYED'
		AND params = '{"reason": "fixed", "replay_id": "rpl_1"}'::jsonb AND at = $2`, target, t1.Add(time.Minute)); n != 1 {
		t.Fatal("the replayed replay did not move as the second DLQ_REPLAY row")
	}
	// Rows the old table cannot hold: another action, an unknown dead letter.
	exec(`INSERT INTO admin_audit (actor, action, target, outcome) VALUES
		('user:5', 'RECONCILE', '', 'OK'), ('user:5', 'DLQ_REPLAY', 'dead_letter:999999', 'NOT_FOUND')`)
	exec(`INSERT INTO admin_audit (actor, action, target, params, outcome) VALUES
		('user:6', 'DLQ_REPLAY', $1, '{"reason": "again", "detail": "inbox shows SUCCEEDED", "replay_id": "rpl_2"}', 'SKIPPED_ALREADY_APPLIED')`, target)

	if _, err := p.DownTo(ctx, 12); err != nil {
		t.Fatalf("down to 12: %v", err)
	}
	if n := count(`SELECT count(*) FROM pg_tables WHERE tablename = 'admin_audit'`); n != 0 {
		t.Fatal("admin_audit still exists after the down migration")
	}
	if n := count(`SELECT count(*) FROM dead_letter_audit`); n != 3 {
		t.Fatalf("%d dead_letter_audit rows after down, want the 3 replays of dead letter %d", n, dl)
	}
	if n := count(`SELECT count(*) FROM dead_letter_audit WHERE dead_letter_id = $1 AND action = 'REPLAY' AND (
		(actor = 'user:3' AND reason = 'too early replay cap 3 reached' AND replay_id IS NULL AND outcome = 'REFUSED' AND created_at = $2) OR
		(actor = 'user:4' AND reason = 'fixed' AND replay_id = 'rpl_1' AND outcome = 'REPLAYED' AND created_at = $3) OR
		(actor = 'user:6' AND reason = 'again inbox shows SUCCEEDED' AND replay_id = 'rpl_2' AND outcome = 'SKIPPED_ALREADY_APPLIED'))`,
		dl, t1, t1.Add(time.Minute)); n != 3 {
		t.Fatalf("%d dead_letter_audit rows restored as they were, want 3", n)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if n := count(`SELECT count(*) FROM admin_audit WHERE action = 'DLQ_REPLAY' AND target = $1`, target); n != 3 {
		t.Fatalf("%d DLQ_REPLAY rows after up again, want 3", n)
	}
}
