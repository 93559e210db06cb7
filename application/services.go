package application

import (
	"context"

	"github.com/seckill-dev/seckill/ports"
)

// OrderService implements the buyer-facing driving port by delegating to
// the use cases.
type OrderService struct {
	place   *PlaceOrder
	queries *Queries
	life    *OrderLifecycle
}

// NewOrderService assembles the port.
func NewOrderService(place *PlaceOrder, queries *Queries, life *OrderLifecycle) *OrderService {
	return &OrderService{place: place, queries: queries, life: life}
}

var _ ports.OrderService = (*OrderService)(nil)

// PlaceOrder implements ports.OrderService.
func (s *OrderService) PlaceOrder(ctx context.Context, cmd ports.PlaceOrderCommand) (ports.PlaceOrderResult, error) {
	return s.place.Place(ctx, cmd)
}

// GetOrder implements ports.OrderService.
func (s *OrderService) GetOrder(ctx context.Context, userID int64, orderID string) (ports.OrderView, error) {
	return s.queries.GetOrder(ctx, userID, orderID)
}

// PayOrder implements ports.OrderService.
func (s *OrderService) PayOrder(ctx context.Context, orderID, paymentID string) (ports.OrderView, error) {
	return s.life.Pay(ctx, orderID, paymentID)
}

// CancelOrder implements ports.OrderService.
func (s *OrderService) CancelOrder(ctx context.Context, userID int64, orderID string) (ports.OrderView, error) {
	return s.life.Cancel(ctx, userID, orderID)
}
