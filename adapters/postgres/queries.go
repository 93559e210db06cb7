package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// GetOrderView implements ports.OrderQueries in one query outside any
// transaction: the orders projection row, else the order's rejection as a
// REJECTED view (Reason = the rejection reason, CreatedAt = UpdatedAt =
// rejected_at), else ports.ErrNotFound.
//
// PAYING is shown as CREATED: it is a step inside PayOrder (PaymentStarted
// and Paid are normally recorded together), the order is still unpaid and
// cancelable, and the visible statuses have no PAYING. A canceled order's
// Reason is its cancel reason.
func (s *Store) GetOrderView(ctx context.Context, orderID string) (ports.OrderView, error) {
	var (
		v                                                   ports.OrderView
		status                                              string
		createdAt, updatedAt, expiresAt, paidAt, canceledAt pgtype.Timestamptz
	)
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `
			SELECT order_id, reservation_id, activity_id, sku_id, user_id, status,
			       coalesce(cancel_reason, ''), aggregate_version, coalesce(payment_id, ''),
			       created_at, updated_at, expires_at, paid_at, canceled_at
			FROM (
			    SELECT 0 AS pick, order_id, reservation_id, activity_id, sku_id, user_id, status,
			           cancel_reason, aggregate_version, payment_id,
			           created_at, updated_at, expires_at, paid_at, canceled_at
			    FROM orders WHERE order_id = $1
			    UNION ALL
			    SELECT 1, order_id, reservation_id, activity_id, sku_id, user_id, 'REJECTED',
			           reason, 0, NULL,
			           rejected_at, rejected_at, NULL, NULL, NULL
			    FROM order_rejections WHERE order_id = $1
			) v
			ORDER BY pick
			LIMIT 1`, orderID).Scan(
			&v.OrderID, &v.ReservationID, &v.ActivityID, &v.SKUID, &v.UserID, &status,
			&v.Reason, &v.AggregateVersion, &v.PaymentID,
			&createdAt, &updatedAt, &expiresAt, &paidAt, &canceledAt)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.OrderView{}, fmt.Errorf("postgres: order view of %s: %w", orderID, ports.ErrNotFound)
	}
	if err != nil {
		if errors.Is(err, ports.ErrTransient) {
			return ports.OrderView{}, err
		}
		return ports.OrderView{}, s.classify("order view", err)
	}
	v.Status = visibleStatus(status)
	v.CreatedAt, v.UpdatedAt, v.ExpiresAt = timeOf(createdAt), timeOf(updatedAt), timeOf(expiresAt)
	v.PaidAt, v.CanceledAt = timeOf(paidAt), timeOf(canceledAt)
	return v, nil
}

// visibleStatus maps a stored status to the externally visible one.
func visibleStatus(s string) ports.OrderStatus {
	switch order.Status(s) {
	case order.StatusCreated, order.StatusPaying:
		return ports.OrderCreated
	case order.StatusPaid:
		return ports.OrderPaid
	case order.StatusCanceled:
		return ports.OrderCanceled
	}
	return ports.OrderStatus(s) // REJECTED
}
