package benchenv

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SaleBooks is what PostgreSQL holds about one activity after a sale (SKU
// 1), the facts `seckill-bench sale` and `chaos` check their invariants on.
type SaleBooks struct {
	// Live orders (not CANCELED).
	Live int64
	// NoStock: accepted order ids rejected NO_FINAL_STOCK (the entry
	// acknowledged more than the stock).
	NoStock int64
	// DupUsers: users with more than one live order (I2).
	DupUsers int64
	// DupEffects: message ids with more than one ORDER_CREATED ledger
	// entry (I3).
	DupEffects int64
}

// ReadSaleBooks reads SaleBooks for activityID; accepted are the order ids
// buyers were told.
func ReadSaleBooks(ctx context.Context, pool *pgxpool.Pool, activityID int64, accepted []string) (SaleBooks, error) {
	var b SaleBooks
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM orders WHERE activity_id = $1 AND status <> 'CANCELED'),
		       (SELECT count(*) FROM order_rejections WHERE order_id = ANY($2::text[]) AND reason = 'NO_FINAL_STOCK'),
		       (SELECT count(*) FROM (SELECT user_id FROM orders WHERE activity_id = $1 AND status <> 'CANCELED'
		                              GROUP BY user_id HAVING count(*) > 1) d),
		       (SELECT count(*) FROM (SELECT message_id FROM inventory_ledger WHERE activity_id = $1
		                              AND reason = 'ORDER_CREATED' GROUP BY message_id HAVING count(*) > 1) d)`,
		activityID, accepted).Scan(&b.Live, &b.NoStock, &b.DupUsers, &b.DupEffects)
	return b, err
}

// ResolveIDs counts, of the order ids buyers were told, those that are
// orders, those that were rejected (released) and those that are neither.
func ResolveIDs(ctx context.Context, pool *pgxpool.Pool, ids []string) (orders, rejected, open int, err error) {
	err = pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE o.order_id IS NOT NULL),
		       count(*) FILTER (WHERE o.order_id IS NULL AND EXISTS (
		           SELECT 1 FROM order_rejections r WHERE r.order_id = i.id)),
		       count(*) FILTER (WHERE o.order_id IS NULL AND NOT EXISTS (
		           SELECT 1 FROM order_rejections r WHERE r.order_id = i.id))
		FROM unnest($1::text[]) AS i(id) LEFT JOIN orders o ON o.order_id = i.id`, ids).Scan(&orders, &rejected, &open)
	return orders, rejected, open, err
}
