package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// Sale is what the API serves of running a sale (issue 27): the operators'
// calls of AdminService (ListActivities, GetActivity, UpdateActivity,
// PauseActivity, ResumeActivity, CloseActivity over Activities; AddStock
// and RemoveStock over Stock) and the buyers' OrderService.GetActivity and
// ListMyOrders (over Buyers). A nil member answers its calls
// Unimplemented, saying what the server lacks.
type Sale struct {
	Activities ports.ActivityOperations
	Stock      ports.StockOperations
	Buyers     ports.BuyerQueries
}

// HandlerOption configures NewHandler.
type HandlerOption func(*handlerOptions)

type handlerOptions struct{ sale Sale }

// WithSale serves s's calls (without it they answer Unimplemented).
func WithSale(s Sale) HandlerOption { return func(o *handlerOptions) { o.sale = s } }

// Bounds of the paged calls (the application applies the same).
const (
	maxActivityPage = 500
	maxOrderPage    = 100
	maxPageToken    = 256
	// endsAtPath is the only update_mask path UpdateActivity accepts.
	endsAtPath = "ends_at"
)

func unimplemented(what string) error {
	return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("this server does not serve %s", what))
}

func activityIDs(activityID, skuID int64) error {
	return first(positiveID("activity_id", activityID), positiveID("sku_id", skuID))
}

func pageArgs(size int32, max int, token string) error {
	if size < 0 || int(size) > max {
		return ports.InvalidField("page_size", "must be between 0 and %d", max)
	}
	if len(token) > maxPageToken {
		return ports.InvalidField("page_token", "is not a token returned by this method")
	}
	return nil
}

// The states of the API and of the ports, index for index.
var (
	apiStates = []seckillv1.ActivityState{
		seckillv1.ActivityState_ACTIVITY_STATE_SCHEDULED, seckillv1.ActivityState_ACTIVITY_STATE_ON_SALE,
		seckillv1.ActivityState_ACTIVITY_STATE_PAUSED, seckillv1.ActivityState_ACTIVITY_STATE_SOLD_OUT,
		seckillv1.ActivityState_ACTIVITY_STATE_ENDED,
	}
	portStates = []ports.ActivityState{
		ports.ActivityScheduled, ports.ActivityOnSale, ports.ActivityPaused, ports.ActivitySoldOut, ports.ActivityEnded,
	}
)

func stateToAPI(s ports.ActivityState) seckillv1.ActivityState {
	for i, p := range portStates {
		if p == s {
			return apiStates[i]
		}
	}
	return seckillv1.ActivityState_ACTIVITY_STATE_UNSPECIFIED
}

func statesFromAPI(states []seckillv1.ActivityState) ([]ports.ActivityState, error) {
	out := make([]ports.ActivityState, 0, len(states))
next:
	for _, s := range states {
		for i, a := range apiStates {
			if a == s {
				out = append(out, portStates[i])
				continue next
			}
		}
		return nil, ports.InvalidField("states", "%v is not a state to filter by (use ACTIVITY_STATE_SCHEDULED, _ON_SALE, _PAUSED, _SOLD_OUT or _ENDED)", s)
	}
	return out, nil
}

func activityMsg(a ports.Activity) *seckillv1.Activity {
	return &seckillv1.Activity{
		ActivityId:     a.ActivityID,
		SkuId:          a.SKUID,
		Stock:          a.Stock,
		StartsAt:       timestamppb.New(a.StartsAt),
		EndsAt:         timestamppb.New(a.EndsAt),
		PaymentTimeout: durationpb.New(a.PaymentTimeout),
		ReservationTtl: durationpb.New(a.ReservationTTL),
		StockLanes:     int32(a.Lanes()), //nolint:gosec // at most ports.MaxStockLanes
		UnitPrice:      a.UnitPrice,
		Currency:       a.Currency,
	}
}

func statusMsg(s ports.ActivityStatus) *seckillv1.ActivityStatus {
	return &seckillv1.ActivityStatus{
		Activity:  activityMsg(s.Activity),
		State:     stateToAPI(s.State),
		Paused:    s.Paused,
		ClosedAt:  ts(s.ClosedAt),
		SoldOut:   s.SoldOut,
		UpdatedAt: ts(s.UpdatedAt),
	}
}

// stockReportMsg converts a stock report to the API's (GetStockReport
// and GetActivity's books).
func stockReportMsg(r ports.StockReport) *seckillv1.StockReport {
	return &seckillv1.StockReport{
		ActivityId:          r.ActivityID,
		SkuId:               r.SKUID,
		InitialStock:        r.InitialStock,
		RedisAvailable:      r.RedisAvailable,
		PendingReservations: r.PendingReservations,
		NonCanceledOrders:   r.NonCanceledOrders,
		ReleasesInFlight:    r.ReleasesInFlight,
		Drift:               r.Drift(),
		PgFinalStock:        r.PGFinalStock,
		MeasuredAt:          ts(r.MeasuredAt),
	}
}

// ListActivities implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) ListActivities(ctx context.Context, req *connect.Request[seckillv1.ListActivitiesRequest]) (*connect.Response[seckillv1.ListActivitiesResponse], error) {
	if h.sale.Activities == nil {
		return nil, unimplemented("activity operations")
	}
	m := req.Msg
	if err := pageArgs(m.GetPageSize(), maxActivityPage, m.GetPageToken()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	states, err := statesFromAPI(m.GetStates())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	page, err := h.sale.Activities.ListActivities(ctx, ports.ActivityFilter{States: states}, int(m.GetPageSize()), m.GetPageToken())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	out := &seckillv1.ListActivitiesResponse{NextPageToken: page.NextToken}
	for _, s := range page.Activities {
		out.Activities = append(out.Activities, statusMsg(s))
	}
	return connect.NewResponse(out), nil
}

// GetActivity implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) GetActivity(ctx context.Context, req *connect.Request[seckillv1.GetActivityRequest]) (*connect.Response[seckillv1.GetActivityResponse], error) {
	if h.sale.Activities == nil {
		return nil, unimplemented("activity operations")
	}
	if err := activityIDs(req.Msg.GetActivityId(), req.Msg.GetSkuId()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	d, err := h.sale.Activities.GetActivity(ctx, req.Msg.GetActivityId(), req.Msg.GetSkuId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.GetActivityResponse{Activity: statusMsg(d.Status), Books: stockReportMsg(d.Books)}), nil
}

// UpdateActivity implements seckillv1connect.AdminServiceHandler: the
// update_mask may name only ends_at (empty: ends_at, which must then be
// set).
func (h *AdminHandler) UpdateActivity(ctx context.Context, req *connect.Request[seckillv1.UpdateActivityRequest]) (*connect.Response[seckillv1.UpdateActivityResponse], error) {
	if h.sale.Activities == nil {
		return nil, unimplemented("activity operations")
	}
	u, err := updateFromRequest(req.Msg)
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	actor, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	s, err := h.sale.Activities.UpdateActivity(ctx, actor, u)
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.UpdateActivityResponse{Activity: statusMsg(s)}), nil
}

func updateFromRequest(m *seckillv1.UpdateActivityRequest) (ports.ActivityUpdate, error) {
	if err := activityIDs(m.GetActivityId(), m.GetSkuId()); err != nil {
		return ports.ActivityUpdate{}, err
	}
	for _, p := range m.GetUpdateMask().GetPaths() {
		if p != endsAtPath {
			return ports.ActivityUpdate{}, ports.InvalidField("update_mask",
				"path %q cannot be changed during a sale: only ends_at can (stock through AddStock and RemoveStock, "+
					"pausing and closing through their calls; the other settings are fixed at creation)", p)
		}
	}
	ends, err := timestamp("ends_at", m.GetEndsAt())
	if err != nil {
		return ports.ActivityUpdate{}, err
	}
	return ports.ActivityUpdate{ActivityID: m.GetActivityId(), SKUID: m.GetSkuId(), EndsAt: &ends}, nil
}

// PauseActivity implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) PauseActivity(ctx context.Context, req *connect.Request[seckillv1.PauseActivityRequest]) (*connect.Response[seckillv1.PauseActivityResponse], error) {
	s, err := h.switchActivity(ctx, req.Spec(), req.Msg.GetActivityId(), req.Msg.GetSkuId(), ports.ActivityOperations.PauseActivity)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&seckillv1.PauseActivityResponse{Activity: statusMsg(s)}), nil
}

// ResumeActivity implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) ResumeActivity(ctx context.Context, req *connect.Request[seckillv1.ResumeActivityRequest]) (*connect.Response[seckillv1.ResumeActivityResponse], error) {
	s, err := h.switchActivity(ctx, req.Spec(), req.Msg.GetActivityId(), req.Msg.GetSkuId(), ports.ActivityOperations.ResumeActivity)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&seckillv1.ResumeActivityResponse{Activity: statusMsg(s)}), nil
}

// switchActivity validates and runs a pause or a resume.
func (h *AdminHandler) switchActivity(ctx context.Context, spec connect.Spec, activityID, skuID int64,
	op func(ports.ActivityOperations, context.Context, string, int64, int64) (ports.ActivityStatus, error)) (ports.ActivityStatus, error) {
	if h.sale.Activities == nil {
		return ports.ActivityStatus{}, unimplemented("activity operations")
	}
	if err := activityIDs(activityID, skuID); err != nil {
		return ports.ActivityStatus{}, h.fail(ctx, spec, err)
	}
	actor, err := actorOf(ctx)
	if err != nil {
		return ports.ActivityStatus{}, err
	}
	s, err := op(h.sale.Activities, ctx, actor, activityID, skuID)
	if err != nil {
		return ports.ActivityStatus{}, h.fail(ctx, spec, err)
	}
	return s, nil
}

// CloseActivity implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) CloseActivity(ctx context.Context, req *connect.Request[seckillv1.CloseActivityRequest]) (*connect.Response[seckillv1.CloseActivityResponse], error) {
	if h.sale.Activities == nil {
		return nil, unimplemented("activity operations")
	}
	if err := activityIDs(req.Msg.GetActivityId(), req.Msg.GetSkuId()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	actor, err := actorOf(ctx)
	if err != nil {
		return nil, err
	}
	res, err := h.sale.Activities.CloseActivity(ctx, actor, req.Msg.GetActivityId(), req.Msg.GetSkuId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.CloseActivityResponse{Activity: statusMsg(res.Status), Unsold: res.Unsold}), nil
}

// stockChange validates the fields AddStock and RemoveStock share.
func stockChange(activityID, skuID, quantity int64, requestID string) (ports.StockChange, error) {
	if err := first(
		activityIDs(activityID, skuID),
		clientID("request_id", requestID),
	); err != nil {
		return ports.StockChange{}, err
	}
	if quantity <= 0 || quantity > maxStock {
		return ports.StockChange{}, ports.InvalidField("quantity", "must be between 1 and %d", maxStock)
	}
	return ports.StockChange{ActivityID: activityID, SKUID: skuID, Quantity: quantity, RequestID: requestID}, nil
}

// AddStock implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) AddStock(ctx context.Context, req *connect.Request[seckillv1.AddStockRequest]) (*connect.Response[seckillv1.AddStockResponse], error) {
	m := req.Msg
	res, err := h.changeStock(ctx, req.Spec(), m.GetActivityId(), m.GetSkuId(), m.GetQuantity(), m.GetRequestId(),
		ports.StockOperations.AddStock)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&seckillv1.AddStockResponse{Applied: res.Applied, Stock: res.Stock, Available: res.Available}), nil
}

// RemoveStock implements seckillv1connect.AdminServiceHandler.
func (h *AdminHandler) RemoveStock(ctx context.Context, req *connect.Request[seckillv1.RemoveStockRequest]) (*connect.Response[seckillv1.RemoveStockResponse], error) {
	m := req.Msg
	res, err := h.changeStock(ctx, req.Spec(), m.GetActivityId(), m.GetSkuId(), m.GetQuantity(), m.GetRequestId(),
		ports.StockOperations.RemoveStock)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&seckillv1.RemoveStockResponse{Applied: res.Applied, Stock: res.Stock, Available: res.Available}), nil
}

func (h *AdminHandler) changeStock(ctx context.Context, spec connect.Spec, activityID, skuID, quantity int64, requestID string,
	op func(ports.StockOperations, context.Context, string, ports.StockChange) (ports.StockChangeResult, error)) (ports.StockChangeResult, error) {
	if h.sale.Stock == nil {
		return ports.StockChangeResult{}, unimplemented("stock operations (AddStock, RemoveStock)")
	}
	c, err := stockChange(activityID, skuID, quantity, requestID)
	if err != nil {
		return ports.StockChangeResult{}, h.fail(ctx, spec, err)
	}
	actor, err := actorOf(ctx)
	if err != nil {
		return ports.StockChangeResult{}, err
	}
	res, err := op(h.sale.Stock, ctx, actor, c)
	if err != nil {
		return ports.StockChangeResult{}, h.fail(ctx, spec, err)
	}
	return res, nil
}

// GetActivity implements seckillv1connect.OrderServiceHandler: what any
// authenticated buyer may know of an activity SKU (never the stock).
func (h *OrderHandler) GetActivity(ctx context.Context, req *connect.Request[seckillv1.OrderServiceGetActivityRequest]) (*connect.Response[seckillv1.OrderServiceGetActivityResponse], error) {
	if h.buyers == nil {
		return nil, unimplemented("buyer queries")
	}
	if err := activityIDs(req.Msg.GetActivityId(), req.Msg.GetSkuId()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	a, err := h.buyers.GetActivity(ctx, req.Msg.GetActivityId(), req.Msg.GetSkuId())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	return connect.NewResponse(&seckillv1.OrderServiceGetActivityResponse{
		ActivityId: a.ActivityID, SkuId: a.SKUID, State: stateToAPI(a.State),
		StartsAt: ts(a.StartsAt), EndsAt: ts(a.EndsAt), ServerTime: ts(a.ServerTime), SoldOut: a.SoldOut,
		UnitPrice: a.UnitPrice, Currency: a.Currency,
	}), nil
}

// ListMyOrders implements seckillv1connect.OrderServiceHandler: the
// caller's own orders (the token's user id; the request names none).
func (h *OrderHandler) ListMyOrders(ctx context.Context, req *connect.Request[seckillv1.ListMyOrdersRequest]) (*connect.Response[seckillv1.ListMyOrdersResponse], error) {
	if h.buyers == nil {
		return nil, unimplemented("buyer queries")
	}
	if err := pageArgs(req.Msg.GetPageSize(), maxOrderPage, req.Msg.GetPageToken()); err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	id, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	page, err := h.buyers.ListMyOrders(ctx, id.UserID, int(req.Msg.GetPageSize()), req.Msg.GetPageToken())
	if err != nil {
		return nil, h.fail(ctx, req.Spec(), err)
	}
	out := &seckillv1.ListMyOrdersResponse{NextPageToken: page.NextToken}
	for _, v := range page.Orders {
		if v.UserID != id.UserID { // never another buyer's order, whatever the port returns
			return nil, h.fail(ctx, req.Spec(), errors.New("list my orders: an order of another user"))
		}
		out.Orders = append(out.Orders, orderView(v))
	}
	return connect.NewResponse(out), nil
}
