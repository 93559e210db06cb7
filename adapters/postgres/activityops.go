package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/ports"
)

// activityColumns are the columns scanActivityRecord reads, in its order.
const activityColumns = `activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl,
	stock_lanes, unit_price, currency, paused, closed_at, updated_at`

// scanActivityRecord reads activityColumns; times are returned in UTC.
func scanActivityRecord(r interface{ Scan(dest ...any) error }) (ports.ActivityRecord, error) {
	var (
		rec                ports.ActivityRecord
		a                  = &rec.Activity
		payTimeout, rsvTTL pgtype.Interval
		closedAt           pgtype.Timestamptz
	)
	if err := r.Scan(&a.ActivityID, &a.SKUID, &a.Stock, &a.StartsAt, &a.EndsAt, &payTimeout, &rsvTTL, &a.StockLanes,
		&a.UnitPrice, &a.Currency, &a.Paused, &closedAt, &rec.UpdatedAt); err != nil {
		return ports.ActivityRecord{}, err
	}
	a.StartsAt, a.EndsAt, rec.UpdatedAt = a.StartsAt.UTC(), a.EndsAt.UTC(), rec.UpdatedAt.UTC()
	a.PaymentTimeout, a.ReservationTTL = duration(payTimeout), duration(rsvTTL)
	a.ClosedAt = timeOf(closedAt)
	return rec, nil
}

// GetActivityRecord implements ports.ActivityStore (FOR UPDATE with lock).
func (t *tx) GetActivityRecord(ctx context.Context, activityID, skuID int64, lock bool) (ports.ActivityRecord, error) {
	sql := `SELECT ` + activityColumns + ` FROM activities WHERE activity_id = $1 AND sku_id = $2`
	if lock {
		sql += ` FOR UPDATE`
	}
	rec, err := scanActivityRecord(t.queryRow(ctx, "get activity record", sql, activityID, skuID))
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.ActivityRecord{}, fmt.Errorf("postgres: activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	if err != nil {
		return ports.ActivityRecord{}, err
	}
	return rec, nil
}

// ChangeActivity implements ports.ActivityStore: one UPDATE of ends_at,
// paused, closed_at (NULL for a zero ClosedAt) and updated_at = the
// transaction's now, returning the row.
func (t *tx) ChangeActivity(ctx context.Context, a ports.Activity) (ports.ActivityRecord, error) {
	var closedAt pgtype.Timestamptz
	if !a.ClosedAt.IsZero() {
		closedAt = pgtype.Timestamptz{Time: a.ClosedAt, Valid: true}
	}
	rec, err := scanActivityRecord(t.queryRow(ctx, "change activity", `
		UPDATE activities
		SET ends_at = $3, paused = $4, closed_at = $5, updated_at = coalesce($6::timestamptz, now())
		WHERE activity_id = $1 AND sku_id = $2
		RETURNING `+activityColumns,
		a.ActivityID, a.SKUID, a.EndsAt, a.Paused, closedAt, t.nowArg()))
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.ActivityRecord{}, fmt.Errorf("postgres: change activity %d sku %d: %w", a.ActivityID, a.SKUID, ports.ErrNotFound)
	}
	if err != nil {
		return ports.ActivityRecord{}, err
	}
	return rec, nil
}

// ListActivityRecords implements ports.ActivityStore with one keyset query
// over the primary key; the state filter is a predicate per stored class
// (ended, scheduled, paused, selling), see ports.ActivityStore.
func (t *tx) ListActivityRecords(ctx context.Context, q ports.ActivityListQuery) ([]ports.ActivityRecord, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	all := len(q.States) == 0
	var ended, scheduled, paused, selling bool
	for _, s := range q.States {
		switch s {
		case ports.ActivityEnded:
			ended = true
		case ports.ActivityScheduled:
			scheduled = true
		case ports.ActivityPaused:
			paused = true
		case ports.ActivityOnSale, ports.ActivitySoldOut:
			selling = true
		default:
			return nil, fmt.Errorf("postgres: list activities: %w", ports.InvalidField("states", "unknown state %q", s))
		}
	}
	return query(ctx, t, "list activity records", `
		WITH a AS (
		    SELECT `+activityColumns+`,
		           (closed_at IS NOT NULL OR ends_at <= $4::timestamptz) AS is_ended
		    FROM activities
		    WHERE (activity_id, sku_id) > ($1, $2)
		)
		SELECT `+activityColumns+` FROM a
		WHERE $5::boolean
		   OR ($6::boolean AND is_ended)
		   OR ($7::boolean AND NOT is_ended AND starts_at > $4::timestamptz)
		   OR ($8::boolean AND NOT is_ended AND starts_at <= $4::timestamptz AND paused)
		   OR ($9::boolean AND NOT is_ended AND starts_at <= $4::timestamptz AND NOT paused)
		ORDER BY activity_id, sku_id
		LIMIT $3`,
		func(r pgx.CollectableRow) (ports.ActivityRecord, error) { return scanActivityRecord(r) },
		q.After.ActivityID, q.After.SKUID, q.Limit, q.Now, all, ended, scheduled, paused, selling)
}

// ListUserOrders implements ports.OrderQueries in one keyset query over
// orders_by_user (00019), outside any transaction.
func (s *Store) ListUserOrders(ctx context.Context, userID int64, after ports.OrderCursor, limit int) ([]ports.OrderView, error) {
	if limit <= 0 {
		return nil, nil
	}
	var cursorAt pgtype.Timestamptz
	if !after.CreatedAt.IsZero() {
		cursorAt = pgtype.Timestamptz{Time: after.CreatedAt, Valid: true}
	}
	var out []ports.OrderView
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			SELECT order_id, reservation_id, activity_id, sku_id, user_id, status,
			       coalesce(cancel_reason, ''), aggregate_version, coalesce(payment_id, ''),
			       created_at, updated_at, expires_at, paid_at, canceled_at
			FROM orders
			WHERE user_id = $1 AND ($2::timestamptz IS NULL OR (created_at, order_id) < ($2, $3))
			ORDER BY created_at DESC, order_id DESC
			LIMIT $4`, userID, cursorAt, after.OrderID, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ports.OrderView, error) {
			var (
				v                                                   ports.OrderView
				status                                              string
				createdAt, updatedAt, expiresAt, paidAt, canceledAt pgtype.Timestamptz
			)
			if err := r.Scan(&v.OrderID, &v.ReservationID, &v.ActivityID, &v.SKUID, &v.UserID, &status,
				&v.Reason, &v.AggregateVersion, &v.PaymentID,
				&createdAt, &updatedAt, &expiresAt, &paidAt, &canceledAt); err != nil {
				return ports.OrderView{}, err
			}
			v.Status = visibleStatus(status)
			v.CreatedAt, v.UpdatedAt, v.ExpiresAt = timeOf(createdAt), timeOf(updatedAt), timeOf(expiresAt)
			v.PaidAt, v.CanceledAt = timeOf(paidAt), timeOf(canceledAt)
			return v, nil
		})
		return err
	})
	if err != nil {
		if errors.Is(err, ports.ErrTransient) {
			return nil, err
		}
		return nil, s.classify("list user orders", err)
	}
	return out, nil
}
