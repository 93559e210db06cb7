package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// TakeStock takes min(n, available) units of the activity SKU's final
// stock and returns how many it took; it never goes below zero and takes
// nothing for n <= 0. ports.ErrNotFound when the activity SKU has no final
// stock (CreateActivity was not called).
func (t *tx) TakeStock(ctx context.Context, activityID, skuID, n int64) (int64, error) {
	after, err := t.enter(ctx, "TakeStock")
	if err != nil {
		return 0, err
	}
	defer t.mu.Unlock()
	k := SKU{activityID, skuID}
	avail, ok := t.stock.get(k)
	if !ok {
		return 0, fmt.Errorf("final stock of activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	granted := min(max(n, 0), avail)
	t.stock.put(k, avail-granted)
	if after != nil {
		return 0, after
	}
	return granted, nil
}

// ReturnStock adds n >= 0 units to the activity SKU's final stock;
// ports.ErrNotFound when it has none.
func (t *tx) ReturnStock(ctx context.Context, activityID, skuID, n int64) error {
	after, err := t.enter(ctx, "ReturnStock")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	if n < 0 {
		return fmt.Errorf("memory store ReturnStock: negative amount %d", n)
	}
	k := SKU{activityID, skuID}
	avail, ok := t.stock.get(k)
	if !ok {
		return fmt.Errorf("final stock of activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	t.stock.put(k, avail+n)
	return after
}

// AppendLedger inserts entries, all or nothing: an entry whose
// (reservation, reason) is stored already, or repeated within the call,
// fails the call with an error matching ports.ErrAlreadyExists (the
// UNIQUE(reservation_id, reason) violation).
func (t *tx) AppendLedger(ctx context.Context, entries []ports.LedgerEntry) error {
	after, err := t.enter(ctx, "AppendLedger")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	seen := map[ledgerKey]bool{}
	for _, e := range entries {
		k := ledgerKey{e.ReservationID, string(e.Reason)}
		if seen[k] || t.ledger.has(k) {
			return fmt.Errorf("memory store AppendLedger: reservation %s reason %s: %w", e.ReservationID, e.Reason, ports.ErrAlreadyExists)
		}
		if e.Delta == 0 {
			return fmt.Errorf("memory store AppendLedger: reservation %s: delta must not be 0", e.ReservationID)
		}
		seen[k] = true
	}
	for _, e := range entries {
		t.ledger.put(ledgerKey{e.ReservationID, string(e.Reason)}, LedgerRow{Entry: e, CreatedAt: t.now, seq: t.s.nextRowSeq()})
	}
	return after
}

// CreateActivity stores a and its final stock (a.Stock), with times and
// durations at microsecond precision. When an activity with the same ids
// exists it changes nothing and returns the stored one with created =
// false. Invalid settings (ids <= 0, stock < 0, ends not after starts,
// durations <= 0) fail with a *ports.FieldError.
func (t *tx) CreateActivity(ctx context.Context, a ports.Activity) (ports.Activity, bool, error) {
	after, err := t.enter(ctx, "CreateActivity")
	if err != nil {
		return ports.Activity{}, false, err
	}
	defer t.mu.Unlock()
	if err := a.Validate(); err != nil {
		return ports.Activity{}, false, err
	}
	k := SKU{a.ActivityID, a.SKUID}
	if stored, ok := t.activities.get(k); ok {
		if after != nil {
			return ports.Activity{}, false, after
		}
		return stored, false, nil
	}
	a.StartsAt, a.EndsAt = pgTime(a.StartsAt), pgTime(a.EndsAt)
	a.PaymentTimeout = a.PaymentTimeout.Truncate(time.Microsecond)
	a.ReservationTTL = a.ReservationTTL.Truncate(time.Microsecond)
	t.activities.put(k, a)
	t.stock.put(k, a.Stock)
	if after != nil {
		return ports.Activity{}, false, after
	}
	return a, true, nil
}

// GetActivity returns the stored activity or ports.ErrNotFound.
func (t *tx) GetActivity(ctx context.Context, activityID, skuID int64) (ports.Activity, error) {
	after, err := t.enter(ctx, "GetActivity")
	if err != nil {
		return ports.Activity{}, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return ports.Activity{}, after
	}
	a, ok := t.activities.get(SKU{activityID, skuID})
	if !ok {
		return ports.Activity{}, fmt.Errorf("activity %d sku %d: %w", activityID, skuID, ports.ErrNotFound)
	}
	return a, nil
}
