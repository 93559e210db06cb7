package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/ports"
)

// ClaimReservations implements ports.ReservationOutcomeStore like
// ClaimInbox: one INSERT ... ON CONFLICT (reservation_id) DO NOTHING in
// reservation id order (so overlapping claims wait instead of deadlocking),
// returning the inserted ids in input order, each once.
func (t *tx) ClaimReservations(ctx context.Context, claims []ports.ReservationClaim) ([]string, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	key := func(c ports.ReservationClaim) string { return c.ReservationID }
	unique, sorted, err := claimSet("claim reservations", claims, key)
	if err != nil {
		return nil, err
	}
	n := len(sorted)
	rsv, ord, msg := make([]string, n), make([]string, n), make([]string, n)
	for i, c := range sorted {
		rsv[i], ord[i], msg[i] = c.ReservationID, c.OrderID, c.MessageID
	}
	inserted, err := query(ctx, t, "claim reservations", `
		INSERT INTO reservation_outcomes (reservation_id, order_id, message_id, status, created_at, updated_at)
		SELECT u.reservation_id, u.order_id, u.message_id, 'PROCESSING',
		       coalesce($4::timestamptz, now()), coalesce($4::timestamptz, now())
		FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(reservation_id, order_id, message_id, ord)
		ORDER BY u.ord
		ON CONFLICT (reservation_id) DO NOTHING
		RETURNING reservation_id`,
		pgx.RowTo[string], rsv, ord, msg, t.nowArg())
	if err != nil {
		return nil, err
	}
	return claimedInOrder(unique, key, inserted), nil
}

// FinishReservations implements ports.ReservationOutcomeStore with one
// UPDATE ... FROM unnest. Every outcome must be ORDERED or REJECTED and
// name a claimed reservation; otherwise the call fails.
func (t *tx) FinishReservations(ctx context.Context, outcomes []ports.ReservationOutcome) error {
	if len(outcomes) == 0 {
		return nil
	}
	last := make(map[string]int, len(outcomes))
	for i, o := range outcomes {
		if o.Outcome != ports.OutcomeOrdered && o.Outcome != ports.OutcomeRejected {
			return fmt.Errorf("postgres: finish reservations: %s: invalid outcome %q", o.ReservationID, o.Outcome)
		}
		last[o.ReservationID] = i
	}
	rsv := make([]string, 0, len(last))
	status := make([]string, 0, len(last))
	reason := make([]string, 0, len(last))
	for i, o := range outcomes {
		if last[o.ReservationID] == i {
			rsv, status, reason = append(rsv, o.ReservationID), append(status, o.Outcome), append(reason, o.Reason)
		}
	}
	n, err := t.exec(ctx, "finish reservations", `
		UPDATE reservation_outcomes r
		SET status = u.status, reason = NULLIF(u.reason, ''), updated_at = coalesce($4::timestamptz, now())
		FROM unnest($1::text[], $2::text[], $3::text[]) AS u(reservation_id, status, reason)
		WHERE r.reservation_id = u.reservation_id`,
		rsv, status, reason, t.nowArg())
	if err != nil {
		return err
	}
	if n != int64(len(rsv)) {
		return fmt.Errorf("postgres: finish reservations: %d of %d reservations were never claimed: %w",
			int64(len(rsv))-n, len(rsv), ports.ErrNotFound)
	}
	return nil
}
