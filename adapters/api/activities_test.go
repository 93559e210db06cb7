package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// fakeSale implements the three ports of running a sale, records the
// callers and answers err when set.
type fakeSale struct {
	mu     sync.Mutex
	actors []string
	users  []int64
	update ports.ActivityUpdate
	filter ports.ActivityFilter
	err    error
}

func (f *fakeSale) record(actor string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actors = append(f.actors, actor)
	return f.err
}

func (f *fakeSale) status() ports.ActivityStatus {
	now := time.Now().UTC()
	return ports.ActivityStatus{Activity: ports.Activity{ActivityID: 1, SKUID: 2, Stock: 5, StartsAt: now, EndsAt: now.Add(time.Hour)},
		State: ports.ActivityPaused, Paused: true, UpdatedAt: now}
}

func (f *fakeSale) ListActivities(_ context.Context, filter ports.ActivityFilter, _ int, _ string) (ports.ActivityPage, error) {
	f.mu.Lock()
	f.filter = filter
	f.mu.Unlock()
	return ports.ActivityPage{Activities: []ports.ActivityStatus{f.status()}, NextToken: "1.2"}, f.record("")
}

func (f *fakeSale) GetActivity(context.Context, int64, int64) (ports.ActivityDetail, error) {
	return ports.ActivityDetail{Status: f.status(), Books: ports.StockReport{InitialStock: 5, RedisAvailable: 5}}, f.record("")
}

func (f *fakeSale) UpdateActivity(_ context.Context, actor string, u ports.ActivityUpdate) (ports.ActivityStatus, error) {
	f.mu.Lock()
	f.update = u
	f.mu.Unlock()
	return f.status(), f.record(actor)
}

func (f *fakeSale) PauseActivity(_ context.Context, actor string, _, _ int64) (ports.ActivityStatus, error) {
	return f.status(), f.record(actor)
}

func (f *fakeSale) ResumeActivity(_ context.Context, actor string, _, _ int64) (ports.ActivityStatus, error) {
	return f.status(), f.record(actor)
}

func (f *fakeSale) CloseActivity(_ context.Context, actor string, _, _ int64) (ports.CloseResult, error) {
	return ports.CloseResult{Status: f.status(), Unsold: 3}, f.record(actor)
}

func (f *fakeSale) AddStock(_ context.Context, actor string, c ports.StockChange) (ports.StockChangeResult, error) {
	return ports.StockChangeResult{Applied: true, Stock: 5 + c.Quantity}, f.record(actor)
}

func (f *fakeSale) RemoveStock(_ context.Context, actor string, c ports.StockChange) (ports.StockChangeResult, error) {
	return ports.StockChangeResult{Applied: true, Stock: 5 - c.Quantity}, f.record(actor)
}

// buyers adapts fakeSale to ports.BuyerQueries (its GetActivity is the
// operators').
type buyers struct{ f *fakeSale }

func (b buyers) GetActivity(context.Context, int64, int64) (ports.BuyerActivity, error) {
	now := time.Now().UTC()
	return ports.BuyerActivity{ActivityID: 1, SKUID: 2, State: ports.ActivityOnSale, StartsAt: now, EndsAt: now.Add(time.Hour),
		ServerTime: now, UnitPrice: 100, Currency: "EUR"}, b.f.record("")
}

func (b buyers) ListMyOrders(_ context.Context, userID int64, _ int, _ string) (ports.OrderPage, error) {
	b.f.mu.Lock()
	b.f.users = append(b.f.users, userID)
	b.f.mu.Unlock()
	return ports.OrderPage{Orders: []ports.OrderView{{OrderID: "ord_x", UserID: userID, Status: ports.OrderCreated}}}, b.f.err
}

// startSale serves fake services and, with sale set, the sale's ports.
func startSale(t *testing.T, sale *fakeSale) (base string, client *http.Client) {
	t.Helper()
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var opts []api.HandlerOption
	if sale != nil {
		opts = append(opts, api.WithSale(api.Sale{Activities: sale, Stock: sale, Buyers: buyers{sale}}))
	}
	h, err := api.NewHandler(&fakeOrders{}, &fakeAdmin{}, nil, auth, log, api.DefaultLimits(), nil, api.Observability{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveLimited(t, h, api.DefaultServerLimits())
	base = "http://" + addr
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return base, &http.Client{Transport: tr}
}

// saleCalls calls every operator call of running a sale with tok and
// valid arguments and returns the errors by name.
func saleCalls(ctx context.Context, admin seckillv1connect.AdminServiceClient, tok string) map[string]error {
	const a, s = 1, 2
	out := map[string]error{}
	_, out["ListActivities"] = admin.ListActivities(ctx, withToken(&seckillv1.ListActivitiesRequest{}, tok))
	_, out["GetActivity"] = admin.GetActivity(ctx, withToken(&seckillv1.GetActivityRequest{ActivityId: a, SkuId: s}, tok))
	_, out["UpdateActivity"] = admin.UpdateActivity(ctx, withToken(&seckillv1.UpdateActivityRequest{ActivityId: a, SkuId: s,
		EndsAt: timestamppb.New(time.Now().Add(time.Hour))}, tok))
	_, out["PauseActivity"] = admin.PauseActivity(ctx, withToken(&seckillv1.PauseActivityRequest{ActivityId: a, SkuId: s}, tok))
	_, out["ResumeActivity"] = admin.ResumeActivity(ctx, withToken(&seckillv1.ResumeActivityRequest{ActivityId: a, SkuId: s}, tok))
	_, out["CloseActivity"] = admin.CloseActivity(ctx, withToken(&seckillv1.CloseActivityRequest{ActivityId: a, SkuId: s}, tok))
	_, out["AddStock"] = admin.AddStock(ctx, withToken(&seckillv1.AddStockRequest{ActivityId: a, SkuId: s, Quantity: 1,
		RequestId: "r1"}, tok))
	_, out["RemoveStock"] = admin.RemoveStock(ctx, withToken(&seckillv1.RemoveStockRequest{ActivityId: a, SkuId: s, Quantity: 1,
		RequestId: "r2"}, tok))
	return out
}

// Every operator call of running a sale is refused for buyer, payment and
// events tokens (PermissionDenied) and without a token (Unauthenticated),
// and served for an admin token with the admin named as the actor of
// every change; the buyers' calls are refused for payment and events
// tokens.
func TestSaleCallsAuthorization(t *testing.T) {
	t.Parallel()
	sale := &fakeSale{}
	base, client := startSale(t, sale)
	ctx := context.Background()
	admin := seckillv1connect.NewAdminServiceClient(client, base)
	orders := seckillv1connect.NewOrderServiceClient(client, base)
	for name, tok := range map[string]string{
		"buyer":   token(t, 7, false),
		"payment": scopedToken(t, 7, api.ScopePayment),
		"events":  scopedToken(t, 7, api.ScopeEvents),
	} {
		for call, err := range saleCalls(ctx, admin, tok) {
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("%s token, %s: %v, want PermissionDenied", name, call, err)
			}
		}
	}
	for call, err := range saleCalls(ctx, admin, "") {
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("no token, %s: %v, want Unauthenticated", call, err)
		}
	}
	sale.actors = nil
	for call, err := range saleCalls(ctx, admin, token(t, 99, true)) {
		if err != nil {
			t.Errorf("admin token, %s: %v", call, err)
		}
	}
	changes := 0
	for _, a := range sale.actors {
		if a != "" {
			changes++
			if a != ports.UserActor(99) {
				t.Errorf("actor %q, want %q", a, ports.UserActor(99))
			}
		}
	}
	if changes != 6 {
		t.Errorf("%d changes named an actor, want 6 (update, pause, resume, close, add, remove)", changes)
	}
	for name, tok := range map[string]string{
		"payment": scopedToken(t, 7, api.ScopePayment),
		"events":  scopedToken(t, 7, api.ScopeEvents),
	} {
		_, err := orders.GetActivity(ctx, withToken(&seckillv1.OrderServiceGetActivityRequest{ActivityId: 1, SkuId: 2}, tok))
		wantCode(t, err, connect.CodePermissionDenied)
		_, err = orders.ListMyOrders(ctx, withToken(&seckillv1.ListMyOrdersRequest{}, tok))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s token, ListMyOrders: %v, want PermissionDenied", name, err)
		}
	}
	got, err := orders.GetActivity(ctx, withToken(&seckillv1.OrderServiceGetActivityRequest{ActivityId: 1, SkuId: 2},
		token(t, 7, false)))
	if err != nil || got.Msg.GetState() != seckillv1.ActivityState_ACTIVITY_STATE_ON_SALE || got.Msg.GetServerTime() == nil ||
		got.Msg.GetCurrency() != "EUR" {
		t.Fatalf("buyer GetActivity = %v, %v", got, err)
	}
}

// ListMyOrders lists the caller's orders: the user id is the token's,
// never one of the request.
func TestListMyOrdersIsTheCallers(t *testing.T) {
	t.Parallel()
	sale := &fakeSale{}
	base, client := startSale(t, sale)
	orders := seckillv1connect.NewOrderServiceClient(client, base)
	for _, user := range []int64{7, 8} {
		res, err := orders.ListMyOrders(context.Background(), withToken(&seckillv1.ListMyOrdersRequest{PageSize: 5}, token(t, user, false)))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Msg.GetOrders()) != 1 || res.Msg.GetOrders()[0].GetUserId() != user {
			t.Fatalf("user %d got %v", user, res.Msg.GetOrders())
		}
	}
	if fmt.Sprint(sale.users) != "[7 8]" {
		t.Fatalf("ListMyOrders asked for users %v, want [7 8]", sale.users)
	}
}

// Bad input is InvalidArgument naming the field, before any port is
// called; the update_mask refuses every path but ends_at, saying why.
func TestSaleValidation(t *testing.T) {
	t.Parallel()
	sale := &fakeSale{}
	base, client := startSale(t, sale)
	ctx := context.Background()
	admin := seckillv1connect.NewAdminServiceClient(client, base)
	orders := seckillv1connect.NewOrderServiceClient(client, base)
	adm, buyer := token(t, 99, true), token(t, 7, false)
	later := timestamppb.New(time.Now().Add(time.Hour))
	call := func(f func() error) error { return f() }
	for _, c := range []struct {
		name, field string
		err         error
	}{
		{"list page_size", "page_size", call(func() error {
			_, err := admin.ListActivities(ctx, withToken(&seckillv1.ListActivitiesRequest{PageSize: 501}, adm))
			return err
		})},
		{"list unspecified state", "states", call(func() error {
			_, err := admin.ListActivities(ctx, withToken(&seckillv1.ListActivitiesRequest{
				States: []seckillv1.ActivityState{seckillv1.ActivityState_ACTIVITY_STATE_UNSPECIFIED}}, adm))
			return err
		})},
		{"get activity_id", "activity_id", call(func() error {
			_, err := admin.GetActivity(ctx, withToken(&seckillv1.GetActivityRequest{SkuId: 1}, adm))
			return err
		})},
		{"update a fixed field", "update_mask", call(func() error {
			_, err := admin.UpdateActivity(ctx, withToken(&seckillv1.UpdateActivityRequest{ActivityId: 1, SkuId: 2, EndsAt: later,
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ends_at", "stock"}}}, adm))
			return err
		})},
		{"update without ends_at", "ends_at", call(func() error {
			_, err := admin.UpdateActivity(ctx, withToken(&seckillv1.UpdateActivityRequest{ActivityId: 1, SkuId: 2,
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ends_at"}}}, adm))
			return err
		})},
		{"pause sku_id", "sku_id", call(func() error {
			_, err := admin.PauseActivity(ctx, withToken(&seckillv1.PauseActivityRequest{ActivityId: 1}, adm))
			return err
		})},
		{"close activity_id", "activity_id", call(func() error {
			_, err := admin.CloseActivity(ctx, withToken(&seckillv1.CloseActivityRequest{ActivityId: -1, SkuId: 1}, adm))
			return err
		})},
		{"add quantity", "quantity", call(func() error {
			_, err := admin.AddStock(ctx, withToken(&seckillv1.AddStockRequest{ActivityId: 1, SkuId: 2, RequestId: "r"}, adm))
			return err
		})},
		{"remove request_id", "request_id", call(func() error {
			_, err := admin.RemoveStock(ctx, withToken(&seckillv1.RemoveStockRequest{ActivityId: 1, SkuId: 2, Quantity: 1}, adm))
			return err
		})},
		{"buyer get sku_id", "sku_id", call(func() error {
			_, err := orders.GetActivity(ctx, withToken(&seckillv1.OrderServiceGetActivityRequest{ActivityId: 1}, buyer))
			return err
		})},
		{"my orders page_size", "page_size", call(func() error {
			_, err := orders.ListMyOrders(ctx, withToken(&seckillv1.ListMyOrdersRequest{PageSize: 101}, buyer))
			return err
		})},
	} {
		ce := connectErr(t, c.err, connect.CodeInvalidArgument)
		if got := fieldOf(t, ce); got != c.field {
			t.Errorf("%s: field %q, want %q (%v)", c.name, got, c.field, ce)
		}
	}
	if len(sale.actors) != 0 || len(sale.users) != 0 {
		t.Fatalf("bad input reached the ports: %v %v", sale.actors, sale.users)
	}
	// An empty mask means ends_at; the states filter is passed on.
	if _, err := admin.UpdateActivity(ctx, withToken(&seckillv1.UpdateActivityRequest{ActivityId: 1, SkuId: 2, EndsAt: later}, adm)); err != nil {
		t.Fatal(err)
	}
	if sale.update.EndsAt == nil || !sale.update.EndsAt.Equal(later.AsTime()) {
		t.Fatalf("update = %+v, want ends_at %v", sale.update, later.AsTime())
	}
	res, err := admin.ListActivities(ctx, withToken(&seckillv1.ListActivitiesRequest{States: []seckillv1.ActivityState{
		seckillv1.ActivityState_ACTIVITY_STATE_SOLD_OUT, seckillv1.ActivityState_ACTIVITY_STATE_ENDED}}, adm))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sale.filter.States) != "[SOLD_OUT ENDED]" || res.Msg.GetNextPageToken() != "1.2" ||
		res.Msg.GetActivities()[0].GetState() != seckillv1.ActivityState_ACTIVITY_STATE_PAUSED {
		t.Fatalf("filter %v, answer %v", sale.filter.States, res.Msg)
	}
}

// The ports' errors reach the client mapped: a state refusal is
// FailedPrecondition with its reason, an unknown activity NotFound.
func TestSaleErrors(t *testing.T) {
	t.Parallel()
	sale := &fakeSale{}
	base, client := startSale(t, sale)
	ctx := context.Background()
	admin := seckillv1connect.NewAdminServiceClient(client, base)
	adm := token(t, 99, true)
	for _, c := range []struct {
		err    error
		code   connect.Code
		reason string
	}{
		{fmt.Errorf("resume: %w", ports.ErrActivityState), connect.CodeFailedPrecondition, api.ReasonActivityState},
		{fmt.Errorf("close: %w: %w", ports.ErrActivityState, ports.ErrActivityEnded), connect.CodeFailedPrecondition,
			api.ReasonActivityEnded},
		{fmt.Errorf("close: %w", ports.ErrNotFound), connect.CodeNotFound, ""},
	} {
		sale.err = c.err
		_, err := admin.CloseActivity(ctx, withToken(&seckillv1.CloseActivityRequest{ActivityId: 1, SkuId: 2}, adm))
		ce := connectErr(t, err, c.code)
		if got := reasonOf(t, ce); got != c.reason {
			t.Errorf("%v: reason %q, want %q", c.err, got, c.reason)
		}
	}
}

// Without the sale's ports every new call answers Unimplemented.
func TestSaleCallsUnimplementedWithoutPorts(t *testing.T) {
	t.Parallel()
	base, client := startSale(t, nil)
	ctx := context.Background()
	admin := seckillv1connect.NewAdminServiceClient(client, base)
	orders := seckillv1connect.NewOrderServiceClient(client, base)
	for call, err := range saleCalls(ctx, admin, token(t, 99, true)) {
		if connect.CodeOf(err) != connect.CodeUnimplemented {
			t.Errorf("%s: %v, want Unimplemented", call, err)
		}
	}
	_, err := orders.ListMyOrders(ctx, withToken(&seckillv1.ListMyOrdersRequest{}, token(t, 7, false)))
	wantCode(t, err, connect.CodeUnimplemented)
}
