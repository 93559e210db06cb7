package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/ports"
)

// rollbackTimeout bounds a rollback issued after fn failed or panicked; it
// runs even when the caller's context is already canceled, so the
// connection goes back to the pool clean instead of being closed.
const rollbackTimeout = 5 * time.Second

// InTx implements ports.UnitOfWork: it runs fn in one READ COMMITTED
// transaction. A nil return commits and InTx returns the commit's error
// (classified; a failed deferred constraint or a transaction that an
// ignored error had aborted surfaces here). An error or a panic of fn rolls
// back; the error is returned as is, the panic propagates after the
// rollback. order_tx_latency_seconds observes the whole call, labelled
// commit or rollback.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx ports.Tx) error) error {
	start := time.Now()
	outcome := outcomeRollback
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "postgres transaction", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
		defer func() {
			span.SetAttributes(attribute.String("seckill.tx_outcome", outcome))
			if outcome != outcomeCommit {
				span.SetStatus(codes.Error, outcome)
			}
			span.End()
		}()
	}
	defer func() {
		s.metrics.txLatency.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	}()

	conn, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()

	ptx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return s.classify("begin", err)
	}
	t := &tx{store: s, tx: ptx}
	if s.clock != nil {
		t.now = s.clock.Now().UTC().Truncate(time.Microsecond)
	}
	panicked := true
	defer func() {
		if panicked { // the panic continues once the rollback is done
			t.done = true
			s.rollback(ctx, ptx, "panic")
		}
	}()
	fnErr := fn(ctx, t)
	panicked = false
	t.done = true
	if fnErr != nil {
		s.rollback(ctx, ptx, "error")
		return fnErr
	}
	if err := ptx.Commit(ctx); err != nil {
		return s.classify("commit", err)
	}
	outcome = outcomeCommit
	return nil
}

// rollback ends a failed transaction. Its own error is only logged: the
// caller reports fn's error, and a connection whose rollback failed is
// closed by pgx rather than returned to the pool.
func (s *Store) rollback(ctx context.Context, ptx pgx.Tx, cause string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := ptx.Rollback(rctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		s.log.WarnContext(ctx, "postgres rollback failed",
			slog.String("cause", cause), slog.String("error", err.Error()),
			slog.String("error_class", errorClass(err)))
	}
}

// errorClass names an error for logs: its SQLSTATE, or "transient" or
// "other".
func errorClass(err error) string {
	if code := sqlState(err); code != "" {
		return "sqlstate_" + code
	}
	if isTransient(err) {
		return "transient"
	}
	return "other"
}

// tx is the ports.Tx of one InTx call.
type tx struct {
	store *Store
	tx    pgx.Tx
	// now caches the transaction timestamp after the first Now call, or
	// holds the configured clock's reading from the start (Config.Clock).
	now time.Time
	// done is set when fn returned; using tx afterwards is a bug.
	done bool
}

var _ ports.Tx = (*tx)(nil)

// Now returns the transaction's now() (the same for the whole transaction),
// fetched once and cached, in UTC; with Config.Clock set it is the clock's
// reading taken when the transaction began, and no statement runs.
func (t *tx) Now(ctx context.Context) (time.Time, error) {
	if !t.now.IsZero() {
		return t.now, nil
	}
	var now time.Time
	if err := t.queryRow(ctx, "now", `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, err
	}
	t.now = now.UTC()
	return t.now, nil
}

// nowArg is the argument the adapter's SQL passes for "now", always as
// coalesce($n::timestamptz, now()): NULL without Config.Clock, so the
// statement reads the database's transaction timestamp (the production
// default), else the transaction's instant from the configured clock.
func (t *tx) nowArg() pgtype.Timestamptz {
	if t.store.clock == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t.now, Valid: true}
}

// errTxDone is returned when a ports.Tx is used after its InTx callback
// returned.
var errTxDone = errors.New("postgres: transaction used after its callback returned")

// exec runs a statement in the transaction, classifying its error.
func (t *tx) exec(ctx context.Context, op, sql string, args ...any) (int64, error) {
	if t.done {
		return 0, errTxDone
	}
	tag, err := t.tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, t.store.classify(op, err)
	}
	return tag.RowsAffected(), nil
}

// query runs a query in the transaction and collects its rows with scan,
// classifying errors.
func query[T any](ctx context.Context, t *tx, op, sql string, scan pgx.RowToFunc[T], args ...any) ([]T, error) {
	if t.done {
		return nil, errTxDone
	}
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, t.store.classify(op, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, t.store.classify(op, err)
	}
	return out, nil
}

// queryRow runs a one-row query; Scan's error is classified.
func (t *tx) queryRow(ctx context.Context, op, sql string, args ...any) row {
	if t.done {
		return row{err: errTxDone}
	}
	return row{store: t.store, op: op, row: t.tx.QueryRow(ctx, sql, args...)}
}

// row wraps pgx.Row to classify its error; pgx.ErrNoRows stays reachable.
type row struct {
	store *Store
	op    string
	row   pgx.Row
	err   error
}

// Scan scans the row, classifying the error.
func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if err := r.row.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: %s: %w", r.op, err)
		}
		return r.store.classify(r.op, err)
	}
	return nil
}
