package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

var secret = []byte("test-secret-0123456789")

// fakeOrders records calls and answers with err when set.
type fakeOrders struct {
	mu   sync.Mutex
	cmds []ports.PlaceOrderCommand
	err  error
	// entered and release, when set, hold every PlaceOrder call inside
	// the handler until release is closed.
	entered chan struct{}
	release chan struct{}
}

func (f *fakeOrders) PlaceOrder(_ context.Context, cmd ports.PlaceOrderCommand) (ports.PlaceOrderResult, error) {
	if f.release != nil {
		f.entered <- struct{}{}
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, cmd)
	if f.err != nil {
		return ports.PlaceOrderResult{}, f.err
	}
	return ports.PlaceOrderResult{OrderID: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5", ReservationID: "rsv_x", Status: ports.OrderQueuing}, nil
}

func (f *fakeOrders) GetOrder(context.Context, int64, string) (ports.OrderView, error) {
	return ports.OrderView{}, f.err
}

func (f *fakeOrders) PayOrder(context.Context, string, string) (ports.OrderView, error) {
	return ports.OrderView{}, f.err
}

func (f *fakeOrders) CancelOrder(context.Context, int64, string) (ports.OrderView, error) {
	return ports.OrderView{}, f.err
}

type fakeAdmin struct{ created []ports.Activity }

func (f *fakeAdmin) CreateActivity(_ context.Context, _ string, a ports.Activity) (ports.Activity, error) {
	f.created = append(f.created, a)
	return a, nil
}

func (f *fakeAdmin) GetStockReport(context.Context, int64, int64) (ports.StockReport, error) {
	return ports.StockReport{InitialStock: 10, RedisAvailable: 4, NonCanceledOrders: 6}, nil
}

func (f *fakeAdmin) ListDeadLetters(context.Context, string, int, string) (ports.DeadLetterPage, error) {
	return ports.DeadLetterPage{}, nil
}

func (f *fakeAdmin) ReplayDeadLetter(context.Context, string, int64, string) (ports.ReplayResult, error) {
	return ports.ReplayResult{}, nil
}

type env struct {
	orders *fakeOrders
	admin  *fakeAdmin
	base   string
	client *http.Client
}

func start(t *testing.T) *env {
	t.Helper()
	return startWith(t, api.DefaultLimits(), &fakeOrders{})
}

// startWith serves fake services behind the real handler with limits.
func startWith(t *testing.T, limits api.Limits, orders *fakeOrders) *env {
	t.Helper()
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &env{orders: orders, admin: &fakeAdmin{}}
	h, err := api.NewHandler(e.orders, e.admin, nil, auth, log, limits, nil, api.Observability{})
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer("127.0.0.1:0", h, log, api.DefaultServerLimits())
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, time.Second, func(a net.Addr) { addrc <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	select {
	case a := <-addrc:
		e.base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	e.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections) // runs before the server stops
	return e
}

func token(t *testing.T, user int64, admin bool) string {
	t.Helper()
	tok, err := api.MintToken(secret, user, admin, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func withToken[T any](msg *T, tok string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if tok != "" {
		r.Header().Set("Authorization", "Bearer "+tok)
	}
	return r
}

// wantCode fails the test unless err is a Connect error with code.
func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	_ = connectErr(t, err, code) // the assertion is the point; the error itself is not needed
}

// connectErr returns err as a Connect error with code, failing the test
// otherwise.
func connectErr(t *testing.T, err error, code connect.Code) *connect.Error {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
	return ce
}

func fieldOf(t *testing.T, ce *connect.Error) string {
	t.Helper()
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatal(err)
		}
		if br, ok := v.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}

func reasonOf(t *testing.T, ce *connect.Error) string {
	t.Helper()
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatal(err)
		}
		if info, ok := v.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func TestAuthenticationAndAuthorization(t *testing.T) {
	e := start(t)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	admin := seckillv1connect.NewAdminServiceClient(e.client, e.base, connect.WithGRPC())
	ctx := context.Background()
	req := &seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 2, RequestId: "r1"}

	_, err := orders.PlaceOrder(ctx, withToken(req, ""))
	wantCode(t, err, connect.CodeUnauthenticated)

	_, err = orders.PlaceOrder(ctx, withToken(req, "not-a-jwt"))
	wantCode(t, err, connect.CodeUnauthenticated)

	expired, err := api.MintToken(secret, 7, false, -time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = orders.PlaceOrder(ctx, withToken(req, expired))
	wantCode(t, err, connect.CodeUnauthenticated)

	forged, err := api.MintToken([]byte("another-secret-0123456789"), 7, true, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, err = orders.PlaceOrder(ctx, withToken(req, forged))
	wantCode(t, err, connect.CodeUnauthenticated)

	_, err = admin.GetStockReport(ctx, withToken(&seckillv1.GetStockReportRequest{ActivityId: 1, SkuId: 2}, token(t, 7, false)))
	wantCode(t, err, connect.CodePermissionDenied)

	res, err := admin.GetStockReport(ctx, withToken(&seckillv1.GetStockReportRequest{ActivityId: 1, SkuId: 2}, token(t, 7, true)))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetReport().GetDrift(); got != 0 {
		t.Fatalf("drift = %d, want 0", got)
	}

	out, err := orders.PlaceOrder(ctx, withToken(req, token(t, 42, false)))
	if err != nil {
		t.Fatal(err)
	}
	if out.Msg.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_QUEUING {
		t.Fatalf("status = %v", out.Msg.GetStatus())
	}
	if got := e.orders.cmds[len(e.orders.cmds)-1].UserID; got != 42 {
		t.Fatalf("user id = %d, want 42 from the token", got)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	e := start(t)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base, connect.WithGRPC())
	admin := seckillv1connect.NewAdminServiceClient(e.client, e.base)
	ctx := context.Background()
	tok := token(t, 9, true)
	cases := []struct {
		name  string
		call  func() error
		field string
	}{
		{"activity_id zero", func() error {
			_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{SkuId: 1, RequestId: "r"}, tok))
			return err
		}, "activity_id"},
		{"sku_id negative", func() error {
			_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: -3, RequestId: "r"}, tok))
			return err
		}, "sku_id"},
		{"request_id empty", func() error {
			_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 1}, tok))
			return err
		}, "request_id"},
		{"request_id too long", func() error {
			_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 1, RequestId: strings.Repeat("x", 129)}, tok))
			return err
		}, "request_id"},
		{"order_id malformed", func() error {
			_, err := orders.GetOrder(ctx, withToken(&seckillv1.GetOrderRequest{OrderId: "ord_nope"}, tok))
			return err
		}, "order_id"},
		{"payment_id empty", func() error {
			_, err := orders.PayOrder(ctx, withToken(&seckillv1.PayOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
			return err
		}, "payment_id"},
		{"ends before starts", func() error {
			now := time.Now()
			_, err := admin.CreateActivity(ctx, withToken(&seckillv1.CreateActivityRequest{
				ActivityId: 1, SkuId: 1, Stock: 5,
				StartsAt: timestamppb.New(now), EndsAt: timestamppb.New(now.Add(-time.Hour)),
				PaymentTimeout: durationpb.New(time.Minute), ReservationTtl: durationpb.New(time.Minute),
			}, tok))
			return err
		}, "ends_at"},
		{"reservation_ttl missing", func() error {
			now := time.Now()
			_, err := admin.CreateActivity(ctx, withToken(&seckillv1.CreateActivityRequest{
				ActivityId: 1, SkuId: 1, Stock: 5,
				StartsAt: timestamppb.New(now), EndsAt: timestamppb.New(now.Add(time.Hour)),
				PaymentTimeout: durationpb.New(time.Minute),
			}, tok))
			return err
		}, "reservation_ttl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ce := connectErr(t, c.call(), connect.CodeInvalidArgument)
			if got := fieldOf(t, ce); got != c.field {
				t.Fatalf("field = %q, want %q (message %q)", got, c.field, ce.Message())
			}
			if !strings.Contains(ce.Message(), c.field) {
				t.Fatalf("message %q does not name %q", ce.Message(), c.field)
			}
		})
	}
	if len(e.orders.cmds) != 0 || len(e.admin.created) != 0 {
		t.Fatal("invalid requests reached the application")
	}
}

func TestErrorMapping(t *testing.T) {
	e := start(t)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	ctx := context.Background()
	tok := token(t, 5, false)
	cases := []struct {
		err    error
		code   connect.Code
		reason string
	}{
		{ports.ErrSoldOut, connect.CodeFailedPrecondition, "SOLD_OUT"},
		{ports.ErrAlreadyPurchased, connect.CodeAlreadyExists, "ALREADY_PURCHASED"},
		{ports.ErrActivityNotFound, connect.CodeFailedPrecondition, "ACTIVITY_NOT_FOUND"},
		{ports.ErrBacklog, connect.CodeResourceExhausted, "BACKLOG"},
		{ports.ErrRateLimited, connect.CodeResourceExhausted, "RATE_LIMITED"},
		{ports.ErrRequestIDReused, connect.CodeInvalidArgument, "REQUEST_ID_REUSED"},
		{ports.ErrOrderNotPayable, connect.CodeFailedPrecondition, "ORDER_NOT_PAYABLE"},
		{ports.ErrOrderNotCancelable, connect.CodeFailedPrecondition, "ORDER_NOT_CANCELABLE"},
		{ports.ErrNotFound, connect.CodeNotFound, ""},
		{ports.ErrTransient, connect.CodeUnavailable, ""},
		{errors.New("pq: relation orders does not exist at 10.0.0.7"), connect.CodeInternal, ""},
	}
	for _, c := range cases {
		e.orders.err = c.err
		_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 1, RequestId: "r"}, tok))
		ce := connectErr(t, err, c.code)
		if got := reasonOf(t, ce); got != c.reason {
			t.Errorf("%v: reason = %q, want %q", c.err, got, c.reason)
		}
		if c.code == connect.CodeInternal && strings.Contains(ce.Message(), "10.0.0.7") {
			t.Errorf("internal error leaked: %q", ce.Message())
		}
	}
}

func TestHealthAndReflection(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	hc := connect.NewClient[healthpb.HealthCheckRequest, healthpb.HealthCheckResponse](
		e.client, e.base+"/grpc.health.v1.Health/Check", connect.WithGRPC())
	for _, svc := range []string{"", seckillv1connect.OrderServiceName, seckillv1connect.AdminServiceName} {
		res, err := hc.CallUnary(ctx, connect.NewRequest(&healthpb.HealthCheckRequest{Service: svc}))
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		if res.Msg.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v", svc, res.Msg.GetStatus())
		}
	}

	// Reflection answers on the API handler without a token, as on the
	// operations handler.
	for _, base := range []string{e.base, serveOps(t)} {
		got := listServices(t, e.client, base)
		for _, want := range []string{seckillv1connect.OrderServiceName, seckillv1connect.AdminServiceName} {
			if !strings.Contains(got, want) {
				t.Fatalf("reflection on %s lists %q, missing %q", base, got, want)
			}
		}
	}
	// The error details resolve by name, so a client reading the schema
	// from the server decodes them.
	for _, symbol := range []string{"google.rpc.ErrorInfo", "google.rpc.BadRequest"} {
		rc := connect.NewClient[reflectionpb.ServerReflectionRequest, reflectionpb.ServerReflectionResponse](
			e.client, e.base+"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", connect.WithGRPC())
		stream := rc.CallBidiStream(ctx)
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
		}); err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseRequest()
		res, err := stream.Receive()
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseResponse()
		if e := res.GetErrorResponse(); e != nil || len(res.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Fatalf("reflection does not resolve %s: %v", symbol, e)
		}
	}
}

// listServices asks reflection v1 at base for the services and returns
// their names joined by commas.
func listServices(t *testing.T, client connect.HTTPClient, base string, opts ...connect.ClientOption) string {
	t.Helper()
	rc := connect.NewClient[reflectionpb.ServerReflectionRequest, reflectionpb.ServerReflectionResponse](
		client, base+"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", append(opts, connect.WithGRPC())...)
	stream := rc.CallBidiStream(context.Background())
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Receive()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseResponse()
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return strings.Join(names, ",")
}

// serveOps serves the operations handler and returns its base URL.
func serveOps(t *testing.T) string {
	t.Helper()
	_, addr := serveLimited(t, api.NewOpsHandler(api.OpsOptions{}), api.ServerLimits{})
	return "http://" + addr
}
