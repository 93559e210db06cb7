package postgres

import (
	"context"
	"fmt"

	"github.com/seckill-dev/seckill/ports"
)

// ledgerKey is inventory_ledger's UNIQUE(reservation_id, reason).
const ledgerKey = "inventory_ledger_reservation_reason_key"

// AppendLedger implements ports.LedgerStore with one INSERT ... SELECT FROM
// unnest. An entry repeating an existing (reservation, reason) fails the
// call with an error matching ports.ErrAlreadyExists (and aborts the
// transaction): a doubled stock effect is a bug, never silently absorbed.
func (t *tx) AppendLedger(ctx context.Context, entries []ports.LedgerEntry) error {
	if len(entries) == 0 {
		return nil
	}
	n := len(entries)
	activity, sku, delta := make([]int64, n), make([]int64, n), make([]int64, n)
	reason, ord, rsv, msg := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, e := range entries {
		activity[i], sku[i], delta[i] = e.ActivityID, e.SKUID, e.Delta
		reason[i], ord[i], rsv[i], msg[i] = string(e.Reason), e.OrderID, e.ReservationID, e.MessageID
	}
	_, err := t.exec(ctx, "append ledger", `
		INSERT INTO inventory_ledger
		    (activity_id, sku_id, delta, reason, order_id, reservation_id, message_id, created_at)
		SELECT u.activity_id, u.sku_id, u.delta, u.reason, u.order_id, u.reservation_id,
		       NULLIF(u.message_id, ''), coalesce($8::timestamptz, now())
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
		     WITH ORDINALITY AS u(activity_id, sku_id, delta, reason, order_id, reservation_id, message_id, ord)
		ORDER BY u.ord`,
		activity, sku, delta, reason, ord, rsv, msg, t.nowArg())
	if err != nil && sqlState(err) == codeUniqueViolation && constraintOf(err) == ledgerKey {
		return fmt.Errorf("postgres: append ledger: entry repeats a (reservation, reason): %w: %w", ports.ErrAlreadyExists, err)
	}
	return err
}
