package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/ports"
)

// stockChangeColumns are the columns scanStockChange reads, in order.
const stockChangeColumns = `request_id, activity_id, sku_id, delta, status, actor, created_at, applied_at,
	stock_before, stock_after, available`

// scanStockChange reads stockChangeColumns; times are returned in UTC and
// the result columns of a PENDING change as 0.
func scanStockChange(r interface{ Scan(dest ...any) error }) (ports.StockChangeRecord, error) {
	var (
		c                  ports.StockChangeRecord
		status             string
		appliedAt          pgtype.Timestamptz
		before, after, avl pgtype.Int8
	)
	if err := r.Scan(&c.RequestID, &c.ActivityID, &c.SKUID, &c.Delta, &status, &c.Actor, &c.CreatedAt, &appliedAt,
		&before, &after, &avl); err != nil {
		return ports.StockChangeRecord{}, err
	}
	c.Status = ports.StockChangeStatus(status)
	c.CreatedAt = c.CreatedAt.UTC()
	if appliedAt.Valid {
		c.AppliedAt = appliedAt.Time.UTC()
	}
	c.StockBefore, c.StockAfter, c.Available = before.Int64, after.Int64, avl.Int64
	return c, nil
}

// BeginStockChange implements ports.StockChangeStore with one INSERT ...
// ON CONFLICT DO NOTHING; when the request id exists (also when a
// concurrent transaction inserted it and committed) the stored row is
// returned with created = false. An unknown activity SKU is
// ports.ErrNotFound (checked first, so the transaction stays usable).
func (t *tx) BeginStockChange(ctx context.Context, c ports.StockChangeRecord) (ports.StockChangeRecord, bool, error) {
	if c.RequestID == "" || c.Delta == 0 {
		return ports.StockChangeRecord{}, false, fmt.Errorf("postgres: begin stock change: request id and a non-zero delta are required")
	}
	var exists bool
	if err := t.queryRow(ctx, "begin stock change", `
		SELECT EXISTS (SELECT 1 FROM activities WHERE activity_id = $1 AND sku_id = $2)`,
		c.ActivityID, c.SKUID).Scan(&exists); err != nil {
		return ports.StockChangeRecord{}, false, err
	}
	if !exists {
		return ports.StockChangeRecord{}, false, fmt.Errorf("postgres: stock change of activity %d sku %d: %w",
			c.ActivityID, c.SKUID, ports.ErrNotFound)
	}
	n, err := t.exec(ctx, "begin stock change", `
		INSERT INTO stock_changes (request_id, activity_id, sku_id, delta, actor, created_at)
		VALUES ($1, $2, $3, $4, $5, coalesce($6::timestamptz, now()))
		ON CONFLICT (request_id) DO NOTHING`,
		c.RequestID, c.ActivityID, c.SKUID, c.Delta, c.Actor, t.nowArg())
	if err != nil {
		return ports.StockChangeRecord{}, false, err
	}
	stored, err := t.getStockChange(ctx, c.RequestID, false)
	if err != nil {
		return ports.StockChangeRecord{}, false, err
	}
	return stored, n > 0, nil
}

// getStockChange reads one change, locking it when lock is set.
func (t *tx) getStockChange(ctx context.Context, requestID string, lock bool) (ports.StockChangeRecord, error) {
	q := `SELECT ` + stockChangeColumns + ` FROM stock_changes WHERE request_id = $1`
	if lock {
		q += ` FOR UPDATE`
	}
	c, err := scanStockChange(t.queryRow(ctx, "get stock change", q, requestID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.StockChangeRecord{}, fmt.Errorf("postgres: stock change %q: %w", requestID, ports.ErrNotFound)
	}
	return c, err
}

// LockStockChange implements ports.StockChangeStore (SELECT ... FOR
// UPDATE).
func (t *tx) LockStockChange(ctx context.Context, requestID string) (ports.StockChangeRecord, error) {
	return t.getStockChange(ctx, requestID, true)
}

// ApplyStockChange implements ports.StockChangeStore. One statement moves
// activities.stock by the delta and marks the change APPLIED with the
// stock before and after; then the final stock moves: return_stock for an
// addition, take_stock for a removal, which must take every unit (it
// takes from the buckets in the order migration 00002 describes, so it
// cannot deadlock with order transactions).
func (t *tx) ApplyStockChange(ctx context.Context, requestID string, available int64) (ports.StockChangeRecord, error) {
	c, err := scanStockChange(t.queryRow(ctx, "apply stock change", `
		WITH ch AS (
		    SELECT request_id, activity_id, sku_id, delta FROM stock_changes
		    WHERE request_id = $1 AND status = 'PENDING'
		), moved AS (
		    UPDATE activities a SET stock = a.stock + ch.delta
		    FROM ch WHERE a.activity_id = ch.activity_id AND a.sku_id = ch.sku_id
		    RETURNING a.stock - ch.delta AS before, a.stock AS after
		)
		UPDATE stock_changes s
		SET status = 'APPLIED', applied_at = coalesce($3::timestamptz, now()),
		    stock_before = moved.before, stock_after = moved.after, available = $2
		FROM moved WHERE s.request_id = $1
		RETURNING `+prefixed("s.", stockChangeColumns),
		requestID, available, t.nowArg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.StockChangeRecord{}, fmt.Errorf("postgres: apply stock change %q: not pending: %w", requestID, ports.ErrActivityState)
	}
	if err != nil {
		return ports.StockChangeRecord{}, err
	}
	if c.Delta > 0 {
		return c, t.ReturnStock(ctx, c.ActivityID, c.SKUID, c.Delta)
	}
	took, err := t.TakeStock(ctx, c.ActivityID, c.SKUID, -c.Delta)
	if err != nil {
		return ports.StockChangeRecord{}, err
	}
	if took != -c.Delta {
		return ports.StockChangeRecord{}, fmt.Errorf("postgres: apply stock change %q: the final stock of activity %d sku %d holds %d of the %d units to remove",
			requestID, c.ActivityID, c.SKUID, took, -c.Delta)
	}
	return c, nil
}

// RefuseStockChange implements ports.StockChangeStore.
func (t *tx) RefuseStockChange(ctx context.Context, requestID string, removable int64) (ports.StockChangeRecord, error) {
	c, err := scanStockChange(t.queryRow(ctx, "refuse stock change", `
		UPDATE stock_changes
		SET status = 'REFUSED', applied_at = coalesce($3::timestamptz, now()), available = $2
		WHERE request_id = $1 AND status = 'PENDING'
		RETURNING `+stockChangeColumns,
		requestID, removable, t.nowArg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.StockChangeRecord{}, fmt.Errorf("postgres: refuse stock change %q: not pending: %w", requestID, ports.ErrActivityState)
	}
	return c, err
}

// PendingStockChanges implements ports.StockChangeStore. It does not lock:
// the worker locks each change when it finishes it.
func (t *tx) PendingStockChanges(ctx context.Context, createdBefore time.Time, limit int) ([]ports.StockChangeRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	return query(ctx, t, "pending stock changes", `
		SELECT `+stockChangeColumns+` FROM stock_changes
		WHERE status = 'PENDING' AND created_at < $1
		ORDER BY created_at, request_id LIMIT $2`,
		func(r pgx.CollectableRow) (ports.StockChangeRecord, error) { return scanStockChange(r) },
		createdBefore, limit)
}

// LockPendingStockChanges implements ports.StockChangeStore, locking in
// request id order (FOR UPDATE; a change finished by a transaction this
// one waited for is not returned, READ COMMITTED re-checks the status).
func (t *tx) LockPendingStockChanges(ctx context.Context, activityID, skuID int64) ([]string, error) {
	return query(ctx, t, "lock pending stock changes", `
		SELECT request_id FROM stock_changes
		WHERE activity_id = $1 AND sku_id = $2 AND status = 'PENDING'
		ORDER BY request_id FOR UPDATE`,
		pgx.RowTo[string], activityID, skuID)
}

// HasPendingStockChanges implements ports.StockChangeStore.
func (t *tx) HasPendingStockChanges(ctx context.Context, activityID, skuID int64) (bool, error) {
	var ok bool
	err := t.queryRow(ctx, "has pending stock changes", `
		SELECT EXISTS (SELECT 1 FROM stock_changes
		               WHERE activity_id = $1 AND sku_id = $2 AND status = 'PENDING')`,
		activityID, skuID).Scan(&ok)
	return ok, err
}

// prefixed qualifies every column of a comma-separated list with prefix.
func prefixed(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}
