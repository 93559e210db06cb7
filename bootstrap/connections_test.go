package bootstrap_test

import (
	"bytes"
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
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// apiServer is a second API listener on the running system's use cases,
// with limits of the test's choosing (the configuration has no variables
// for them yet).
type apiServer struct {
	srv    *api.Server
	addr   string
	orders seckillv1connect.OrderServiceClient
}

// serveAPI serves the system's OrderService and AdminService with limits
// and server limits sl on a loopback port until the test ends.
func (s *system) serveAPI(limits api.Limits, sl api.ServerLimits) *apiServer {
	s.t.Helper()
	auth, err := api.NewAuthenticator([]byte(s.cfg.AuthSecret))
	if err != nil {
		s.t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(testWriter{s.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := api.NewHandler(s.app.Orders, s.app.Admin, nil, auth, log, limits, nil, api.Observability{})
	if err != nil {
		s.t.Fatal(err)
	}
	srv := api.NewServer("127.0.0.1:0", h, log, sl)
	addr, err := srv.Listen()
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, time.Second, nil) }()
	s.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			s.t.Errorf("test API server: %v", err)
		}
	})
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	s.t.Cleanup(tr.CloseIdleConnections)
	return &apiServer{srv: srv, addr: addr.String(),
		orders: seckillv1connect.NewOrderServiceClient(&http.Client{Transport: tr}, "http://"+addr.String(), connect.WithGRPC())}
}

// openHeaderBlock opens an HTTP/2 connection to addr and sends a HEADERS
// frame without END_HEADERS (half a request's header block), then
// nothing.
func openHeaderBlock(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes()}); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedWithin reports whether the server closed c before within passed
// (whatever it sent first is read and dropped).
func closedWithin(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnectionsSlowClientsDoNotStarveABuyer holds 200 idle TCP
// connections and 20 HTTP/2 connections with a half-sent header block
// from 127.0.0.1 against the service's own listener (default limits):
// a buyer's calls still answer, and every half-sent header block is cut
// long before the idle timeout would cut it.
func TestConnectionsSlowClientsDoNotStarveABuyer(t *testing.T) {
	s := startSystem(t, options{})
	s.activity(95, 100, time.Hour, time.Minute)
	addr := strings.TrimPrefix(s.base, "http://")
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	slow := make([]net.Conn, 20)
	for i := range slow {
		slow[i] = openHeaderBlock(t, addr)
	}
	res, err := s.place(context.Background(), 96, 95, "slow-clients-1")
	if err != nil {
		t.Fatalf("a buyer beside 220 slow connections: %v", err)
	}
	if _, err := s.getOrder(96, res.GetOrderId()); err != nil {
		t.Fatalf("the buyer's GetOrder beside 220 slow connections: %v", err)
	}
	idle := api.DefaultServerLimits().IdleTimeout
	var wg sync.WaitGroup
	open := make(chan int, len(slow))
	for i, c := range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !closedWithin(c, idle/2) {
				open <- i
			}
		}()
	}
	wg.Wait()
	close(open)
	for i := range open {
		t.Errorf("half-sent header block %d still open at half the idle timeout (%s)", i, idle/2)
	}
}

// TestConnectionsPerClientCapRefusesTheNext: with a cap of three
// connections per address, a fourth from 127.0.0.1 is closed unanswered
// while the three held ones keep serving a buyer.
func TestConnectionsPerClientCapRefusesTheNext(t *testing.T) {
	s := startSystem(t, options{})
	s.activity(97, 10, time.Hour, time.Minute)
	sl := api.DefaultServerLimits()
	sl.MaxConnsPerClient = 3
	a := s.serveAPI(api.DefaultLimits(), sl)
	ctx := context.Background()
	get := &seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}
	// Three HTTP/2 clients of one connection each.
	var clients []seckillv1connect.OrderServiceClient
	for range 3 {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: p, MaxConnsPerHost: 1}
		t.Cleanup(tr.CloseIdleConnections)
		c := seckillv1connect.NewOrderServiceClient(&http.Client{Transport: tr}, "http://"+a.addr, connect.WithGRPC())
		if _, err := c.GetOrder(ctx, authed(get, s.token(98, false))); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("held connection: %v, want NotFound", err)
		}
		clients = append(clients, c)
	}
	c, err := net.Dial("tcp", a.addr)
	if err == nil {
		defer c.Close()
		if !closedWithin(c, 10*time.Second) {
			t.Fatal("a fourth connection from the address stayed open")
		}
	}
	if st := a.srv.ConnStats(); st.Refused != 1 || st.Open != 3 {
		t.Fatalf("connection stats %+v, want 1 refused, 3 open", st)
	}
	for i, c := range clients {
		if _, err := c.PlaceOrder(ctx, authed(&seckillv1.PlaceOrderRequest{ActivityId: 97, SkuId: 1,
			RequestId: "cap-" + string(rune('a'+i))}, s.token(int64(99+i), false))); err != nil {
			t.Fatalf("a buyer on held connection %d: %v", i, err)
		}
	}
}

// TestConnectionsSlowHeaderBlockIsCut: on a listener with a short header
// timeout, a half-sent HTTP/2 header block is closed within it, before
// the idle timeout, while a complete call on another connection answers.
func TestConnectionsSlowHeaderBlockIsCut(t *testing.T) {
	s := startSystem(t, options{})
	sl := api.DefaultServerLimits()
	sl.ReadHeaderTimeout, sl.IdleTimeout = 500*time.Millisecond, time.Minute
	a := s.serveAPI(api.DefaultLimits(), sl)
	c := openHeaderBlock(t, a.addr)
	_, err := a.orders.GetOrder(context.Background(), authed(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, s.token(100, false)))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a complete call beside the slow one: %v, want NotFound", err)
	}
	if !closedWithin(c, sl.IdleTimeout/2) {
		t.Fatal("a half-sent header block was still open at half the idle timeout")
	}
	if st := a.srv.ConnStats(); st.HeaderTimeouts != 1 {
		t.Fatalf("header timeouts %d, want 1", st.HeaderTimeouts)
	}
}
