package memory

import (
	"context"
	"fmt"

	"github.com/seckill-dev/seckill/ports"
)

// OrderViews is the in-memory query view of orders; it implements
// ports.OrderViews. Get it from Redis.OrderViews (a separate type because
// ports.Reservations and ports.OrderViews both name a Get method).
type OrderViews struct {
	r *Redis
}

var _ ports.OrderViews = (*OrderViews)(nil)

// OrderViews returns the order view store sharing r's state and faults
// ("ViewApply", "ViewGet").
func (r *Redis) OrderViews() *OrderViews { return &OrderViews{r: r} }

// Apply stores v, replacing the stored view entirely, when its
// AggregateVersion is greater than the stored one's (or none is stored),
// and reports whether it did. An empty order id fails with a
// *ports.FieldError.
func (o *OrderViews) Apply(ctx context.Context, v ports.OrderView) (bool, error) {
	if v.OrderID == "" {
		return false, ports.InvalidField("order_id", "is required")
	}
	r := o.r
	after, err := r.enter(ctx, "ViewApply")
	if err != nil {
		return false, err
	}
	defer r.mu.Unlock()
	if cur, ok := r.views[v.OrderID]; ok && cur.AggregateVersion >= v.AggregateVersion {
		return false, after
	}
	r.views[v.OrderID] = v
	if after != nil {
		return false, after
	}
	return true, nil
}

// Get returns the stored view or ports.ErrNotFound.
func (o *OrderViews) Get(ctx context.Context, orderID string) (ports.OrderView, error) {
	r := o.r
	after, err := r.enter(ctx, "ViewGet")
	if err != nil {
		return ports.OrderView{}, err
	}
	defer r.mu.Unlock()
	if after != nil {
		return ports.OrderView{}, after
	}
	v, ok := r.views[orderID]
	if !ok {
		return ports.OrderView{}, fmt.Errorf("order view %s: %w", orderID, ports.ErrNotFound)
	}
	return v, nil
}
