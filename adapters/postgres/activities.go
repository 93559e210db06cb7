package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/ports"
)

// CreateActivity implements ports.ActivityStore. One statement inserts the
// activity and, only if it was new, its stock rows: the stock is spread
// over min(Config.StockBuckets, stock) buckets (at least one), the first
// stock % buckets of them holding one unit more. When the activity exists
// (also when a concurrent transaction created it and committed) it returns
// the stored one with created = false. Times and durations are stored at
// microsecond precision and returned in UTC.
func (t *tx) CreateActivity(ctx context.Context, a ports.Activity) (ports.Activity, bool, error) {
	buckets := int64(t.store.stockBuckets)
	if a.Stock < buckets {
		buckets = max(a.Stock, 1)
	}
	n, err := t.exec(ctx, "create activity", `
		WITH created AS (
		    INSERT INTO activities
		        (activity_id, sku_id, stock, starts_at, ends_at, payment_timeout, reservation_ttl, stock_buckets,
		         stock_lanes, unit_price, currency, created_at)
		    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, coalesce($12::timestamptz, now()))
		    ON CONFLICT (activity_id, sku_id) DO NOTHING
		    RETURNING activity_id, sku_id, stock, stock_buckets
		)
		INSERT INTO sku_stock (activity_id, sku_id, bucket, available)
		SELECT c.activity_id, c.sku_id, b.bucket,
		       c.stock / c.stock_buckets + CASE WHEN b.bucket < c.stock % c.stock_buckets THEN 1 ELSE 0 END
		FROM created c, generate_series(0, c.stock_buckets - 1) AS b(bucket)`,
		a.ActivityID, a.SKUID, a.Stock, a.StartsAt, a.EndsAt,
		interval(a.PaymentTimeout), interval(a.ReservationTTL), buckets, a.Lanes(), a.UnitPrice, a.Currency,
		t.nowArg())
	if err != nil {
		return ports.Activity{}, false, err
	}
	stored, err := t.GetActivity(ctx, a.ActivityID, a.SKUID)
	if err != nil {
		return ports.Activity{}, false, err
	}
	return stored, n > 0, nil
}

// GetActivity implements ports.ActivityStore, with the activity's unit
// price and currency and its operator state (paused, closed_at, ends_at as
// moved).
func (t *tx) GetActivity(ctx context.Context, activityID, skuID int64) (ports.Activity, error) {
	rec, err := t.GetActivityRecord(ctx, activityID, skuID, false)
	if err != nil {
		return ports.Activity{}, err
	}
	return rec.Activity, nil
}

// interval encodes a duration as a PostgreSQL interval (microseconds).
func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}

// duration decodes an interval written by interval (days and months are
// only present if someone wrote them by hand: a day counts 24h, a month
// 30 days).
func duration(i pgtype.Interval) time.Duration {
	const day = 24 * time.Hour
	return time.Duration(i.Microseconds)*time.Microsecond +
		time.Duration(i.Days)*day + time.Duration(i.Months)*30*day
}
