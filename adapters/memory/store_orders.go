package memory

import (
	"context"
	"fmt"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// InsertOrders inserts the projection rows of new orders and reports per
// input whether it did. A row is skipped (false) when its order id or its
// reservation id already has a row, or when it is not CANCELED and its
// user already holds a non-canceled order of the activity SKU; earlier
// rows of the same call count. Empty order or reservation ids fail the
// call before anything is written.
func (t *tx) InsertOrders(ctx context.Context, orders []order.Snapshot) ([]bool, error) {
	after, err := t.enter(ctx, "InsertOrders")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	for _, o := range orders {
		if o.OrderID == "" || o.ReservationID == "" {
			return nil, fmt.Errorf("memory store InsertOrders: order %q: order and reservation ids are required", o.OrderID)
		}
	}
	inserted := make([]bool, len(orders))
	for i, o := range orders {
		key := userSKU{o.ActivityID, o.SKUID, o.UserID}
		active := o.Status != order.StatusCanceled
		if t.orders.has(o.OrderID) || t.ordersByRsv.has(o.ReservationID) || (active && t.activeOrder.has(key)) {
			continue
		}
		t.orders.put(o.OrderID, normalizeOrder(o))
		t.ordersByRsv.put(o.ReservationID, o.OrderID)
		if active {
			t.activeOrder.put(key, o.OrderID)
		}
		inserted[i] = true
	}
	if after != nil {
		return nil, after
	}
	return inserted, nil
}

// UpdateOrders overwrites the stored rows of orders whose stored version is
// older than the given snapshot's; others (unknown, same or newer version)
// are left alone. The ids and the (activity, sku, user) of a row never
// change. Re-activating a canceled order while its user holds another
// non-canceled order of the SKU violates the one-order-per-user rule and
// fails the call with ports.ErrAlreadyExists, writing nothing.
func (t *tx) UpdateOrders(ctx context.Context, orders []order.Snapshot) error {
	after, err := t.enter(ctx, "UpdateOrders")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, o := range orders {
		cur, ok := t.orders.get(o.OrderID)
		if !ok || cur.Version >= o.Version || cur.Status != order.StatusCanceled || o.Status == order.StatusCanceled {
			continue
		}
		if other, held := t.activeOrder.get(userSKU{cur.ActivityID, cur.SKUID, cur.UserID}); held && other != cur.OrderID {
			return fmt.Errorf("memory store UpdateOrders: order %s: user %d holds order %s: %w", o.OrderID, cur.UserID, other, ports.ErrAlreadyExists)
		}
	}
	// A payment id confirms one order only (orders_payment_id_key).
	for _, o := range orders {
		if o.PaymentID == "" {
			continue
		}
		var other string
		t.orders.each(func(id string, cur order.Snapshot) bool {
			if id != o.OrderID && cur.PaymentID == o.PaymentID {
				other = id
				return false
			}
			return true
		})
		if other != "" {
			return fmt.Errorf("memory store UpdateOrders: order %s: payment %s confirmed order %s: %w", o.OrderID, o.PaymentID, other, ports.ErrPaymentIDReused)
		}
	}
	for _, o := range orders {
		cur, ok := t.orders.get(o.OrderID)
		if !ok || cur.Version >= o.Version {
			continue
		}
		next := normalizeOrder(o)
		next.OrderID, next.ReservationID = cur.OrderID, cur.ReservationID
		next.ActivityID, next.SKUID, next.UserID = cur.ActivityID, cur.SKUID, cur.UserID
		key := userSKU{cur.ActivityID, cur.SKUID, cur.UserID}
		switch {
		case cur.Status != order.StatusCanceled && next.Status == order.StatusCanceled:
			t.activeOrder.del(key)
		case cur.Status == order.StatusCanceled && next.Status != order.StatusCanceled:
			t.activeOrder.put(key, cur.OrderID)
		}
		t.orders.put(o.OrderID, next)
	}
	return after
}

// AppendEvents appends events to their streams, all or nothing. For each
// order the first event's version must be the stream's last version + 1
// (1 for a new stream), otherwise the call fails with an error matching
// ports.ErrConcurrencyConflict. The events of one order in one call must
// have consecutive versions. Payloads are stored through their JSON form
// (order.EncodePayload / DecodePayload) and times at microsecond precision,
// as PostgreSQL stores them.
func (t *tx) AppendEvents(ctx context.Context, events []order.Event) error {
	after, err := t.enter(ctx, "AppendEvents")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	var ids []string
	byOrder := map[string][]order.Event{}
	for _, e := range events {
		if e.OrderID == "" || e.Payload == nil {
			return fmt.Errorf("memory store AppendEvents: event %s v%d: order id and payload are required", e.OrderID, e.Version)
		}
		stored, err := roundTripEvent(e)
		if err != nil {
			return fmt.Errorf("memory store AppendEvents: %w", err)
		}
		if _, seen := byOrder[e.OrderID]; !seen {
			ids = append(ids, e.OrderID)
		}
		byOrder[e.OrderID] = append(byOrder[e.OrderID], stored)
	}
	for _, id := range ids {
		stream, _ := t.events.get(id)
		last := int64(0)
		if len(stream) > 0 {
			last = stream[len(stream)-1].Version
		}
		evs := byOrder[id]
		if evs[0].Version != last+1 {
			return fmt.Errorf("memory store AppendEvents: order %s: version %d does not follow %d: %w",
				id, evs[0].Version, last, ports.ErrConcurrencyConflict)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Version != evs[i-1].Version+1 {
				return fmt.Errorf("memory store AppendEvents: order %s: versions %d and %d are not consecutive",
					id, evs[i-1].Version, evs[i].Version)
			}
		}
	}
	for _, id := range ids {
		stream, _ := t.events.get(id)
		next := make([]order.Event, 0, len(stream)+len(byOrder[id]))
		next = append(append(next, stream...), byOrder[id]...)
		t.events.put(id, next)
	}
	return after
}

// roundTripEvent returns e as it reads back from PostgreSQL: payload
// through JSON, times in UTC at microsecond precision.
func roundTripEvent(e order.Event) (order.Event, error) {
	if e.Type != e.Payload.EventType() {
		return order.Event{}, fmt.Errorf("event %s v%d: type %s does not match payload %s", e.OrderID, e.Version, e.Type, e.Payload.EventType())
	}
	data, err := order.EncodePayload(e.Payload)
	if err != nil {
		return order.Event{}, err
	}
	p, err := order.DecodePayload(e.Type, e.SchemaVersion, data)
	if err != nil {
		return order.Event{}, err
	}
	e.Payload = p
	e.OccurredAt = pgTime(e.OccurredAt)
	return e, nil
}

// LoadOrderEvents returns a copy of the order's stream, oldest first, or
// ports.ErrNotFound.
func (t *tx) LoadOrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	after, err := t.enter(ctx, "LoadOrderEvents")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	stream, ok := t.events.get(orderID)
	if !ok || len(stream) == 0 {
		return nil, fmt.Errorf("events of order %s: %w", orderID, ports.ErrNotFound)
	}
	return append([]order.Event(nil), stream...), nil
}

// OrdersByReservation maps those of reservationIDs that have an order row
// to the order's id.
func (t *tx) OrdersByReservation(ctx context.Context, reservationIDs []string) (map[string]string, error) {
	after, err := t.enter(ctx, "OrdersByReservation")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	out := map[string]string{}
	for _, rid := range reservationIDs {
		if oid, ok := t.ordersByRsv.get(rid); ok {
			out[rid] = oid
		}
	}
	return out, nil
}

// GetOrderView returns the committed projection of the order as a view
// (PAYING shows as CREATED, the cancel reason as Reason), else its
// committed rejection as a REJECTED view (Reason the rejection's reason,
// AggregateVersion 0, created and updated at the rejection time), else
// ports.ErrNotFound, as the PostgreSQL adapter does. It never waits
// for a running transaction.
func (s *Store) GetOrderView(ctx context.Context, orderID string) (ports.OrderView, error) {
	if err := ctx.Err(); err != nil {
		return ports.OrderView{}, fmt.Errorf("memory store GetOrderView: %w", err)
	}
	if before, _ := s.faults.hit("GetOrderView"); before != nil {
		return ports.OrderView{}, before
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if o, ok := s.t.orders[orderID]; ok {
		return orderView(o), nil
	}
	if r, ok := s.t.rejections[orderID]; ok {
		return rejectionView(r.Rejection), nil
	}
	return ports.OrderView{}, fmt.Errorf("order %s: %w", orderID, ports.ErrNotFound)
}

func orderView(o order.Snapshot) ports.OrderView {
	status := ports.OrderCreated
	switch o.Status {
	case order.StatusPaid:
		status = ports.OrderPaid
	case order.StatusCanceled:
		status = ports.OrderCanceled
	}
	return ports.OrderView{
		OrderID: o.OrderID, ReservationID: o.ReservationID,
		ActivityID: o.ActivityID, SKUID: o.SKUID, UserID: o.UserID,
		Status: status, Reason: string(o.CancelReason), AggregateVersion: o.Version,
		PaymentID: o.PaymentID, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt,
		ExpiresAt: o.ExpiresAt, PaidAt: o.PaidAt, CanceledAt: o.CanceledAt,
	}
}

func rejectionView(r ports.Rejection) ports.OrderView {
	return ports.OrderView{
		OrderID: r.OrderID, ReservationID: r.ReservationID,
		ActivityID: r.ActivityID, SKUID: r.SKUID, UserID: r.UserID,
		Status: ports.OrderRejected, Reason: r.Reason,
		CreatedAt: r.RejectedAt, UpdatedAt: r.RejectedAt,
	}
}

// normalizeOrder stores times as PostgreSQL does.
func normalizeOrder(o order.Snapshot) order.Snapshot {
	o.CreatedAt, o.UpdatedAt, o.ExpiresAt = pgTime(o.CreatedAt), pgTime(o.UpdatedAt), pgTime(o.ExpiresAt)
	o.PaidAt, o.CanceledAt = pgTime(o.PaidAt), pgTime(o.CanceledAt)
	return o
}
