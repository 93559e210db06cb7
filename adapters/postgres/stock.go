package postgres

import (
	"context"
	"fmt"

	"github.com/seckill-dev/seckill/ports"
)

// TakeStock implements ports.StockStore with one call of the take_stock
// function (migration 00002): it takes up to n units from the activity
// SKU's stock buckets, never driving one below zero, and returns how many
// it took. Fewer than n counts in inventory_condition_update_miss_total.
// An unknown activity SKU fails with ports.ErrNotFound.
//
// The bucket it decrements stays locked until the transaction ends; call
// TakeStock at most once per SKU per transaction, and for several SKUs in
// ascending (activity, sku) order, so transactions cannot deadlock on
// stock rows.
func (t *tx) TakeStock(ctx context.Context, activityID, skuID, n int64) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("postgres: take stock: negative quantity %d", n)
	}
	var granted *int64
	if err := t.queryRow(ctx, "take stock", `SELECT take_stock($1, $2, $3)`,
		activityID, skuID, n).Scan(&granted); err != nil {
		return 0, err
	}
	if granted == nil {
		return 0, fmt.Errorf("postgres: take stock of activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	if *granted < n {
		t.store.metrics.stockMisses.Inc()
	}
	return *granted, nil
}

// ReturnStock implements ports.StockStore with one call of the
// return_stock function: n units go back to one bucket (an unlocked one
// when there is). An unknown activity SKU fails with ports.ErrNotFound.
func (t *tx) ReturnStock(ctx context.Context, activityID, skuID, n int64) error {
	if n <= 0 {
		return fmt.Errorf("postgres: return stock: quantity %d must be > 0", n)
	}
	var found bool
	if err := t.queryRow(ctx, "return stock", `SELECT return_stock($1, $2, $3)`,
		activityID, skuID, n).Scan(&found); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("postgres: return stock of activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	return nil
}
