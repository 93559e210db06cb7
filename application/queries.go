package application

import (
	"context"
	"errors"
	"fmt"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Queries answers GetOrder: from the Redis query view maintained by the
// FIFO projection when it has the order, else from PostgreSQL (the
// projection table or the rejection), else from the reservation while the
// order is still QUEUING. Only the owner sees an order; anyone else gets
// ErrNotFound, so order ids cannot be probed.
type Queries struct {
	views        ports.OrderViews
	orders       ports.OrderQueries
	admission    ports.Admission
	reservations ports.Reservations
}

// NewQueries wires the query side. views may be nil (no Redis view).
func NewQueries(views ports.OrderViews, orders ports.OrderQueries, admission ports.Admission, reservations ports.Reservations) *Queries {
	return &Queries{views: views, orders: orders, admission: admission, reservations: reservations}
}

// GetOrder returns userID's order.
func (q *Queries) GetOrder(ctx context.Context, userID int64, orderID string) (ports.OrderView, error) {
	if q.views != nil {
		// The view is a cache: on a miss or an error, read the source of truth.
		if v, err := q.views.Get(ctx, orderID); err == nil {
			return owned(v, userID, orderID)
		}
	}
	v, err := q.orders.GetOrderView(ctx, orderID)
	switch {
	case err == nil:
		return owned(v, userID, orderID)
	case !errors.Is(err, ports.ErrNotFound):
		return ports.OrderView{}, fmt.Errorf("get order %s: %w", orderID, err)
	}
	ref, err := q.admission.LookupOrder(ctx, userID, orderID)
	if err != nil {
		return ports.OrderView{}, fmt.Errorf("order %s: %w", orderID, err)
	}
	r, err := q.reservations.Get(ctx, ref)
	if err != nil {
		return ports.OrderView{}, fmt.Errorf("order %s reservation: %w", orderID, err)
	}
	v = ports.OrderView{
		OrderID: r.OrderID, ReservationID: r.ReservationID, ActivityID: r.ActivityID,
		SKUID: r.SKUID, UserID: r.UserID, Status: ports.OrderQueuing, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt,
	}
	if r.Status == reservation.StatusReleased {
		v.Status, v.Reason = ports.OrderRejected, string(r.ReleaseReason)
	}
	return owned(v, userID, orderID)
}

func owned(v ports.OrderView, userID int64, orderID string) (ports.OrderView, error) {
	if v.UserID != userID {
		return ports.OrderView{}, fmt.Errorf("order %s: %w", orderID, ports.ErrNotFound)
	}
	return v, nil
}
