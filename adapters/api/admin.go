package api

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

var errNoIdentity = errors.New("no identity")

// AdminHandler serves seckill.v1.AdminService over ports.AdminService. The
// auth interceptor has already required the admin scope.
type AdminHandler struct {
	seckillv1connect.UnimplementedAdminServiceHandler
	svc  ports.AdminService
	sale Sale // running a sale (activities.go); nil members: Unimplemented
	log  *slog.Logger
}

// NewAdminHandler returns the handler; the calls of running a sale are
// served by sale's Activities and Stock (nil: Unimplemented).
func NewAdminHandler(svc ports.AdminService, sale Sale, log *slog.Logger) *AdminHandler {
	return &AdminHandler{svc: svc, sale: sale, log: log}
}

// CreateActivity implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) CreateActivity(ctx context.Context, req *connect.Request[seckillv1.CreateActivityRequest]) (*connect.Response[seckillv1.CreateActivityResponse], error) {
	a, err := activityFromRequest(req.Msg)
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	actor, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	stored, err := h.svc.CreateActivity(ctx, actor, a)
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.CreateActivityResponse{Activity: &seckillv1.Activity{
		ActivityId:     stored.ActivityID,
		SkuId:          stored.SKUID,
		Stock:          stored.Stock,
		StartsAt:       timestamppb.New(stored.StartsAt),
		EndsAt:         timestamppb.New(stored.EndsAt),
		PaymentTimeout: durationpb.New(stored.PaymentTimeout),
		ReservationTtl: durationpb.New(stored.ReservationTTL),
		StockLanes:     int32(stored.Lanes()), //nolint:gosec // at most ports.MaxStockLanes
		UnitPrice:      stored.UnitPrice,
		Currency:       stored.Currency,
	}}), nil
}

func activityFromRequest(m *seckillv1.CreateActivityRequest) (ports.Activity, error) {
	if err := first(positiveID("activity_id", m.GetActivityId()), positiveID("sku_id", m.GetSkuId())); err != nil {
		return ports.Activity{}, err
	}
	if m.GetStock() <= 0 || m.GetStock() > maxStock {
		return ports.Activity{}, ports.InvalidField("stock", "must be between 1 and %d", maxStock)
	}
	starts, err := timestamp("starts_at", m.GetStartsAt())
	if err != nil {
		return ports.Activity{}, err
	}
	ends, err := timestamp("ends_at", m.GetEndsAt())
	if err != nil {
		return ports.Activity{}, err
	}
	if !ends.After(starts) {
		return ports.Activity{}, ports.InvalidField("ends_at", "must be after starts_at")
	}
	pay, err := duration("payment_timeout", m.GetPaymentTimeout())
	if err != nil {
		return ports.Activity{}, err
	}
	ttl, err := duration("reservation_ttl", m.GetReservationTtl())
	if err != nil {
		return ports.Activity{}, err
	}
	lanes := m.GetStockLanes()
	if lanes < 0 || lanes > ports.MaxStockLanes {
		return ports.Activity{}, ports.InvalidField("stock_lanes", "must be between 1 and %d (0 means 1)", ports.MaxStockLanes)
	}
	price, currency := m.GetUnitPrice(), m.GetCurrency()
	switch {
	case price < 0:
		return ports.Activity{}, ports.InvalidField("unit_price", "must be >= 0 (minor units; 0 means not priced)")
	case price > 0 && !order.IsCurrency(currency):
		return ports.Activity{}, ports.InvalidField("currency",
			"must be an ISO 4217 code of three upper-case letters (e.g. EUR) when unit_price > 0")
	case price == 0 && currency != "":
		return ports.Activity{}, ports.InvalidField("currency", "must be empty when unit_price is 0")
	}
	return ports.Activity{
		ActivityID: m.GetActivityId(), SKUID: m.GetSkuId(), Stock: m.GetStock(),
		StartsAt: starts, EndsAt: ends, PaymentTimeout: pay, ReservationTTL: ttl,
		StockLanes: int(lanes), UnitPrice: price, Currency: currency,
	}, nil
}

// GetStockReport implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) GetStockReport(ctx context.Context, req *connect.Request[seckillv1.GetStockReportRequest]) (*connect.Response[seckillv1.GetStockReportResponse], error) {
	if err := first(positiveID("activity_id", req.Msg.GetActivityId()), positiveID("sku_id", req.Msg.GetSkuId())); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	r, err := h.svc.GetStockReport(ctx, req.Msg.GetActivityId(), req.Msg.GetSkuId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.GetStockReportResponse{Report: stockReportMsg(r)}), nil
}

// ListDeadLetters implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) ListDeadLetters(ctx context.Context, req *connect.Request[seckillv1.ListDeadLettersRequest]) (*connect.Response[seckillv1.ListDeadLettersResponse], error) {
	m := req.Msg
	if m.GetPageSize() < 0 || m.GetPageSize() > 500 {
		return nil, h.fail(ctx, req.Spec(), ports.InvalidField("page_size", "must be between 0 and 500"))
	}
	if len(m.GetConsumerGroup()) > 255 {
		return nil, h.fail(ctx, req.Spec(), ports.InvalidField("consumer_group", "must be at most 255 characters"))
	}
	if len(m.GetPageToken()) > 64 {
		return nil, h.fail(ctx, req.Spec(), ports.InvalidField("page_token", "is not a token returned by this method"))
	}
	size := int(m.GetPageSize())
	if size == 0 {
		size = 50
	}
	page, err := h.svc.ListDeadLetters(ctx, m.GetConsumerGroup(), size, m.GetPageToken())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	out := &seckillv1.ListDeadLettersResponse{NextPageToken: page.NextToken}
	for _, d := range page.DeadLetters {
		out.DeadLetters = append(out.DeadLetters, &seckillv1.DeadLetter{
			DeadLetterId:  d.ID,
			ConsumerGroup: d.ConsumerGroup,
			Topic:         d.Topic,
			MessageId:     d.MessageID,
			ErrorClass:    d.ErrorClass,
			LastError:     d.LastError,
			Attempts:      d.Attempts,
			FirstSeenAt:   ts(d.FirstSeenAt),
			LastSeenAt:    ts(d.LastSeenAt),
			ReplayCount:   d.ReplayCount,
			Status:        d.Status,
		})
	}
	return connect.NewResponse(out), nil
}

// ReplayDeadLetter implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) ReplayDeadLetter(ctx context.Context, req *connect.Request[seckillv1.ReplayDeadLetterRequest]) (*connect.Response[seckillv1.ReplayDeadLetterResponse], error) {
	if err := first(
		positiveID("dead_letter_id", req.Msg.GetDeadLetterId()),
		text("reason", req.Msg.GetReason(), maxReasonLen),
	); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	actor, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	res, err := h.svc.ReplayDeadLetter(ctx, actor, req.Msg.GetDeadLetterId(), req.Msg.GetReason())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.ReplayDeadLetterResponse{
		ReplayId: res.ReplayID, ReplayCount: res.ReplayCount, Outcome: res.Outcome,
	}), nil
}

// actorOf names the authenticated caller for the audit trail
// (ports.UserActor of the token's user id).
func actorOf(ctx context.Context) (string, error) {
	id, err := identity(ctx)
	if err != nil {
		return "", err
	}
	return ports.UserActor(id.UserID), nil
}

func (h *AdminHandler) fail(ctx context.Context, spec connect.Spec, err error) error {
	return toConnectError(ctx, h.log, spec.Procedure, err)
}
