package api

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// OrderHandler serves seckill.v1.OrderService over ports.OrderService. It
// validates requests, takes the user id from the authenticated identity and
// maps errors in one place.
type OrderHandler struct {
	seckillv1connect.UnimplementedOrderServiceHandler
	svc    ports.OrderService
	buyers ports.BuyerQueries // GetActivity, ListMyOrders (activities.go); nil: Unimplemented
	log    *slog.Logger
}

// NewOrderHandler returns the handler; GetActivity and ListMyOrders are
// served by buyers (nil: Unimplemented).
func NewOrderHandler(svc ports.OrderService, buyers ports.BuyerQueries, log *slog.Logger) *OrderHandler {
	return &OrderHandler{svc: svc, buyers: buyers, log: log}
}

// PlaceOrder implements seckillv1connect.OrderServiceHandler.
func (h *OrderHandler) PlaceOrder(ctx context.Context, req *connect.Request[seckillv1.PlaceOrderRequest]) (*connect.Response[seckillv1.PlaceOrderResponse], error) {
	m := req.Msg
	if err := first(
		positiveID("activity_id", m.GetActivityId()),
		positiveID("sku_id", m.GetSkuId()),
		clientID("request_id", m.GetRequestId()),
	); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	res, err := h.svc.PlaceOrder(ctx, ports.PlaceOrderCommand{
		UserID: id.UserID, ActivityID: m.GetActivityId(), SKUID: m.GetSkuId(), RequestID: m.GetRequestId(),
	})
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.PlaceOrderResponse{
		OrderId: res.OrderID, ReservationId: res.ReservationID, Status: status(res.Status),
	}), nil
}

// GetOrder implements seckillv1connect.OrderServiceHandler.
func (h *OrderHandler) GetOrder(ctx context.Context, req *connect.Request[seckillv1.GetOrderRequest]) (*connect.Response[seckillv1.GetOrderResponse], error) {
	if err := orderID(req.Msg.GetOrderId()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	v, err := h.svc.GetOrder(ctx, id.UserID, req.Msg.GetOrderId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.GetOrderResponse{Order: orderView(v)}), nil
}

// PayOrder implements seckillv1connect.OrderServiceHandler. The caller is
// the payment side (scope "payment" or "admin", checked by the
// interceptor), so any order may be addressed.
func (h *OrderHandler) PayOrder(ctx context.Context, req *connect.Request[seckillv1.PayOrderRequest]) (*connect.Response[seckillv1.PayOrderResponse], error) {
	if err := first(
		orderID(req.Msg.GetOrderId()),
		clientID("payment_id", req.Msg.GetPaymentId()),
	); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	v, err := h.svc.PayOrder(ctx, req.Msg.GetOrderId(), req.Msg.GetPaymentId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.PayOrderResponse{Order: orderView(v)}), nil
}

// CancelOrder implements seckillv1connect.OrderServiceHandler.
func (h *OrderHandler) CancelOrder(ctx context.Context, req *connect.Request[seckillv1.CancelOrderRequest]) (*connect.Response[seckillv1.CancelOrderResponse], error) {
	if err := orderID(req.Msg.GetOrderId()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	v, err := h.svc.CancelOrder(ctx, id.UserID, req.Msg.GetOrderId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.CancelOrderResponse{Order: orderView(v)}), nil
}

func (h *OrderHandler) fail(ctx context.Context, spec connect.Spec, err error) error {
	return toConnectError(ctx, h.log, spec.Procedure, err)
}

// identity returns the caller; the interceptor guarantees it is present,
// so its absence is a wiring bug answered as Unauthenticated.
func identity(ctx context.Context) (Identity, error) {
	id, ok := IdentityFrom(ctx)
	if !ok {
		return Identity{}, connect.NewError(connect.CodeUnauthenticated, errNoIdentity)
	}
	return id, nil
}

func status(s ports.OrderStatus) seckillv1.OrderStatus {
	switch s {
	case ports.OrderQueuing:
		return seckillv1.OrderStatus_ORDER_STATUS_QUEUING
	case ports.OrderCreated:
		return seckillv1.OrderStatus_ORDER_STATUS_CREATED
	case ports.OrderPaid:
		return seckillv1.OrderStatus_ORDER_STATUS_PAID
	case ports.OrderCanceled:
		return seckillv1.OrderStatus_ORDER_STATUS_CANCELED
	case ports.OrderRejected:
		return seckillv1.OrderStatus_ORDER_STATUS_REJECTED
	}
	return seckillv1.OrderStatus_ORDER_STATUS_UNSPECIFIED
}

func orderView(v ports.OrderView) *seckillv1.Order {
	return &seckillv1.Order{
		OrderId:          v.OrderID,
		ReservationId:    v.ReservationID,
		ActivityId:       v.ActivityID,
		SkuId:            v.SKUID,
		UserId:           v.UserID,
		Status:           status(v.Status),
		Reason:           v.Reason,
		AggregateVersion: v.AggregateVersion,
		PaymentId:        v.PaymentID,
		CreatedAt:        ts(v.CreatedAt),
		UpdatedAt:        ts(v.UpdatedAt),
		ExpiresAt:        ts(v.ExpiresAt),
		PaidAt:           ts(v.PaidAt),
		CanceledAt:       ts(v.CanceledAt),
	}
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
