package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/domain/clientid"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// TestPlaceOrderConcurrencyIsBounded holds two PlaceOrder calls inside the
// service with a bound of two: the third is answered ResourceExhausted
// (OVERLOADED) at once, and once one call finishes a new one is taken.
func TestPlaceOrderConcurrencyIsBounded(t *testing.T) {
	limits := api.DefaultLimits()
	limits.PlaceOrderConcurrency = 2
	f := &fakeOrders{entered: make(chan struct{}, 4), release: make(chan struct{})}
	e := startWith(t, limits, f)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base, connect.WithGRPC())
	ctx := context.Background()
	place := func(rid string) error {
		_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 1, RequestId: rid}, token(t, 3, false)))
		return err
	}
	held := make(chan error, 2)
	for _, rid := range []string{"a", "b"} {
		go func() { held <- place(rid) }()
	}
	<-f.entered
	<-f.entered
	ce := connectErr(t, place("c"), connect.CodeResourceExhausted)
	if got := reasonOf(t, ce); got != api.ReasonOverloaded {
		t.Fatalf("reason = %q, want %s", got, api.ReasonOverloaded)
	}
	close(f.release)
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	if err := place("d"); err != nil {
		t.Fatalf("after the held calls finished: %v", err)
	}
}

// TestPayOrderNeedsThePaymentSide: a buyer's token is PermissionDenied; a
// token with the payment scope, or an admin's, reaches the service.
func TestPayOrderNeedsThePaymentSide(t *testing.T) {
	e := start(t)
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	req := &seckillv1.PayOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5", PaymentId: "pay-1"}
	_, err := orders.PayOrder(context.Background(), withToken(req, token(t, 5, false)))
	wantCode(t, err, connect.CodePermissionDenied)
	payer, perr := api.MintScopedToken(secret, 5, []string{api.ScopePayment}, time.Hour, time.Now())
	if perr != nil {
		t.Fatal(perr)
	}
	for _, tok := range []string{payer, token(t, 5, true)} {
		if _, err := orders.PayOrder(context.Background(), withToken(req, tok)); err != nil {
			t.Fatalf("pay with %q scope: %v", tok[:8], err)
		}
	}
}

// FuzzPlaceOrderDecoding feeds arbitrary bodies (JSON and binary protobuf,
// optionally gzip-announced) to the real handler: it never panics, never
// answers 5xx, and whatever reaches the service carries a request_id that
// follows the clientid rule and ids > 0.
func FuzzPlaceOrderDecoding(f *testing.F) {
	f.Add([]byte(`{"activityId":1,"skuId":1,"requestId":"r-1"}`), false, false)
	f.Add([]byte(`{"activityId":"1","skuId":1,"requestId":"`+string(bytes.Repeat([]byte("é"), 65))+`"}`), false, false)
	f.Add([]byte{0x08, 0x01, 0x10, 0x01, 0x1a, 0x01, 'r'}, true, false)
	f.Add([]byte("\x1f\x8b\x08\x00"), false, true)
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		f.Fatal(err)
	}
	orders := &fakeOrders{}
	h, err := api.NewHandler(orders, &fakeAdmin{}, nil, auth, slog.New(slog.NewTextHandler(io.Discard, nil)), api.DefaultLimits(), nil, api.Observability{})
	if err != nil {
		f.Fatal(err)
	}
	tok, err := api.MintToken(secret, 11, false, time.Hour, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, binary, gz bool) {
		req := httptest.NewRequest(http.MethodPost, seckillv1connect.OrderServicePlaceOrderProcedure, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if binary {
			req.Header.Set("Content-Type", "application/proto")
		}
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
		orders.mu.Lock()
		defer orders.mu.Unlock()
		for _, cmd := range orders.cmds {
			if clientid.Validate(cmd.RequestID) != nil || cmd.ActivityID <= 0 || cmd.SKUID <= 0 || cmd.UserID != 11 {
				t.Fatalf("an invalid command reached the service: %+v", cmd)
			}
		}
		orders.cmds = orders.cmds[:0]
	})
}

// TestPayOrderIsRateLimitedPerCaller: PayOrder has a bucket of its own
// per caller: the payment side's burst+1-th call is RATE_LIMITED, while
// another caller's payments are untouched.
func TestPayOrderIsRateLimitedPerCaller(t *testing.T) {
	limits := api.DefaultLimits()
	limits.PayRate, limits.PayBurst = 0.001, 3
	e := startWith(t, limits, &fakeOrders{})
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	ctx := context.Background()
	payer, err := api.MintScopedToken(secret, 9, []string{api.ScopePayment}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req := &seckillv1.PayOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5", PaymentId: "pay-1"}
	for i := range 3 {
		if _, err := orders.PayOrder(ctx, withToken(req, payer)); err != nil {
			t.Fatalf("payment %d of a burst of 3: %v", i+1, err)
		}
	}
	ce := connectErr(t, func() error { _, err := orders.PayOrder(ctx, withToken(req, payer)); return err }(),
		connect.CodeResourceExhausted)
	if got := reasonOf(t, ce); got != api.ReasonRateLimited {
		t.Fatalf("reason = %q, want %s", got, api.ReasonRateLimited)
	}
	if _, err := orders.PayOrder(ctx, withToken(req, token(t, 10, true))); err != nil {
		t.Fatalf("another caller's payment: %v", err)
	}
}

// TestClientAddressIsRateLimited: the per-address bucket counts every
// call from the address, authenticated or not, and answers RATE_LIMITED
// before the token is looked at.
func TestClientAddressIsRateLimited(t *testing.T) {
	limits := api.DefaultLimits()
	limits.ClientRate, limits.ClientBurst = 0.001, 3
	e := startWith(t, limits, &fakeOrders{})
	orders := seckillv1connect.NewOrderServiceClient(e.client, e.base)
	ctx := context.Background()
	get := func(tok string) error {
		_, err := orders.GetOrder(ctx, withToken(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
		return err
	}
	wantCode(t, get(""), connect.CodeUnauthenticated)
	for u := int64(1); u <= 2; u++ {
		if err := get(token(t, u, false)); err != nil {
			t.Fatalf("call %d from the address: %v", u+1, err)
		}
	}
	for _, tok := range []string{token(t, 3, false), ""} {
		ce := connectErr(t, get(tok), connect.CodeResourceExhausted)
		if got := reasonOf(t, ce); got != api.ReasonRateLimited {
			t.Fatalf("reason = %q, want %s", got, api.ReasonRateLimited)
		}
	}
}

// TestUnauthenticatedHTTP1ConnectionsAreClosed: an HTTP/1 call refused
// for its token is answered with "Connection: close" and the connection
// ends; an authenticated call keeps its connection.
func TestUnauthenticatedHTTP1ConnectionsAreClosed(t *testing.T) {
	e := start(t)
	addr := strings.TrimPrefix(e.base, "http://")
	// call answers the status and whether the server announced the close.
	call := func(c net.Conn, br *bufio.Reader, auth, body string) (int, bool) {
		t.Helper()
		fmt.Fprintf(c, "POST /seckill.v1.OrderService/GetOrder HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s",
			auth, len(body), body)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode, res.Close
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	status, closing := call(c, br, "Authorization: Bearer "+token(t, 4, false)+"\r\n", `{"orderId":"ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}`)
	if status != http.StatusOK || closing {
		t.Fatalf("authenticated call: %d, close %v", status, closing)
	}
	// An empty body: nothing unread that would close the connection anyway.
	status, closing = call(c, br, "", "")
	if status != http.StatusUnauthorized || !closing {
		t.Fatalf("tokenless call: %d, close %v; want 401 and Connection: close", status, closing)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("the connection stayed open after the refusal: read %d, %v", n, err)
	}
}
