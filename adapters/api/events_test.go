package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// eventsEnv is the real API handler over an in-memory event log, served on
// loopback.
type eventsEnv struct {
	log  *memory.EventLog
	base string
	h2c  *http.Client // cleartext HTTP/2 (gRPC, Connect)
	h1   *http.Client // HTTP/1.1 (Connect)
}

func startEvents(t *testing.T, limits api.Limits, sl api.ServerLimits) *eventsEnv {
	t.Helper()
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	e := &eventsEnv{log: memory.NewEventLog(50 * time.Millisecond)}
	h, err := api.NewHandler(&fakeOrders{}, &fakeAdmin{}, e.log, auth, slog.New(slog.NewTextHandler(io.Discard, nil)),
		limits, nil, api.Observability{})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveLimited(t, h, sl)
	e.base = "http://" + addr
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Transport{Protocols: p}
	h1 := &http.Transport{}
	e.h2c, e.h1 = &http.Client{Transport: h2}, &http.Client{Transport: h1}
	t.Cleanup(h2.CloseIdleConnections) // runs before the server stops
	t.Cleanup(h1.CloseIdleConnections)
	return e
}

// clients are the protocols a subscriber may use.
func (e *eventsEnv) clients() map[string]seckillv1connect.EventServiceClient {
	return map[string]seckillv1connect.EventServiceClient{
		"connect-h2c": seckillv1connect.NewEventServiceClient(e.h2c, e.base),
		"grpc":        seckillv1connect.NewEventServiceClient(e.h2c, e.base, connect.WithGRPC()),
		"grpc-web":    seckillv1connect.NewEventServiceClient(e.h2c, e.base, connect.WithGRPCWeb()),
		"connect-h1":  seckillv1connect.NewEventServiceClient(e.h1, e.base),
	}
}

func scopedToken(t *testing.T, user int64, scopes ...string) string {
	t.Helper()
	tok, err := api.MintScopedToken(secret, user, scopes, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testEvents are five events of two orders in two activities.
func testEvents() []ports.EventRecord {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ev := func(orderID string, activity, v int64, p order.Payload) ports.EventRecord {
		return ports.EventRecord{ActivityID: activity, SKUID: 10 * activity, UserID: 100 + activity,
			Event: order.Event{OrderID: orderID, Version: v, Type: p.EventType(), SchemaVersion: order.CurrentSchemaVersion,
				OccurredAt: at.Add(time.Duration(v) * time.Second), Payload: p}, StoredSchemaVersion: 1}
	}
	return []ports.EventRecord{
		ev("ord_a", 1, 1, order.Created{OrderID: "ord_a", ReservationID: "rsv_a", MessageID: "msg_a", ActivityID: 1,
			SKUID: 10, UserID: 101, Quantity: 1, ReservedAt: at, ExpiresAt: at.Add(15 * time.Minute),
			UnitPrice: 1999, Currency: "EUR"}),
		ev("ord_b", 2, 1, order.Created{OrderID: "ord_b", ReservationID: "rsv_b", MessageID: "msg_b", Quantity: 1}),
		ev("ord_a", 1, 2, order.PaymentStarted{PaymentID: "pay_a"}),
		ev("ord_b", 2, 2, order.Canceled{Reason: order.ReasonBuyerCanceled}),
		ev("ord_a", 1, 3, order.Paid{PaymentID: "pay_a"}),
	}
}

// receive reads items until n events (not counting checkpoints) arrived,
// at most 1000 items; it returns the events and the checkpoints seen.
func receive(t *testing.T, s *connect.ServerStreamForClient[seckillv1.SubscribeResponse], n int) ([]*seckillv1.OrderEvent, []int64) {
	t.Helper()
	var events []*seckillv1.OrderEvent
	var checkpoints []int64
	for i := 0; len(events) < n && i < 1000; i++ {
		if !s.Receive() {
			t.Fatalf("stream ended after %d events: %v", len(events), s.Err())
		}
		if ev := s.Msg().GetEvent(); ev != nil {
			events = append(events, ev)
		} else {
			checkpoints = append(checkpoints, s.Msg().GetCheckpoint().GetPosition())
		}
	}
	if len(events) < n {
		t.Fatalf("%d events among 1000 items, want %d", len(events), n)
	}
	return events, checkpoints
}

// nextCheckpoint reads items until a checkpoint (at most 1000) and
// returns its position.
func nextCheckpoint(t *testing.T, s *connect.ServerStreamForClient[seckillv1.SubscribeResponse]) int64 {
	t.Helper()
	for range 1000 {
		if !s.Receive() {
			t.Fatalf("stream ended: %v", s.Err())
		}
		if cp := s.Msg().GetCheckpoint(); cp != nil {
			return cp.GetPosition()
		}
	}
	t.Fatal("no checkpoint among 1000 items")
	return 0
}

// streamErr subscribes with req and tok and returns the error the stream
// ends with before its first item.
func streamErr(t *testing.T, c seckillv1connect.EventServiceClient, req *seckillv1.SubscribeRequest, tok string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, withToken(req, tok))
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	if s.Receive() {
		t.Fatalf("stream answered %v, want an error", s.Msg())
	}
	return s.Err()
}

// TestEventStreamDeliversInOrder: over Connect (HTTP/2 and HTTP/1.1), gRPC
// and gRPC-Web, a subscription from 0 receives every stored event in
// position order with its ids and typed payload, a checkpoint of the head,
// then an event appended while it waits.
func TestEventStreamDeliversInOrder(t *testing.T) {
	e := startEvents(t, api.DefaultLimits(), api.DefaultServerLimits())
	e.log.Append(testEvents()...)
	tok := scopedToken(t, 7, api.ScopeEvents)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := c.Subscribe(ctx, withToken(&seckillv1.SubscribeRequest{}, tok))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			events, _ := receive(t, s, 5)
			for i, ev := range events {
				if ev.GetPosition() != int64(i+1) {
					t.Fatalf("event %d at position %d, want %d", i, ev.GetPosition(), i+1)
				}
			}
			first := events[0]
			cr := first.GetCreated()
			if first.GetEventId() != "ord_a:1" || first.GetOrderId() != "ord_a" || first.GetActivityId() != 1 ||
				first.GetSkuId() != 10 || first.GetUserId() != 101 || first.GetAggregateVersion() != 1 ||
				first.GetEventType() != "ORDER_CREATED" || first.GetSchemaVersion() != 2 ||
				cr.GetUnitPrice() != 1999 || cr.GetCurrency() != "EUR" ||
				!first.GetOccurredAt().AsTime().Equal(time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC)) ||
				cr.GetReservationId() != "rsv_a" || cr.GetMessageId() != "msg_a" || cr.GetQuantity() != 1 ||
				!cr.GetExpiresAt().AsTime().Equal(cr.GetReservedAt().AsTime().Add(15*time.Minute)) {
				t.Fatalf("first event %v", first)
			}
			if b := events[1].GetCreated(); b.GetUnitPrice() != 0 || b.GetCurrency() != "" {
				t.Fatalf("an unpriced order's created event %v, want unit price 0 and no currency", events[1])
			}
			if got := events[2].GetPaymentStarted().GetPaymentId(); got != "pay_a" {
				t.Fatalf("payment_started %v", events[2])
			}
			if got := events[3].GetCanceled().GetReason(); got != "BUYER_CANCELED" || events[3].GetEventId() != "ord_b:2" {
				t.Fatalf("canceled %v", events[3])
			}
			if got := events[4].GetPaid().GetPaymentId(); got != "pay_a" || events[4].GetEventType() != "ORDER_PAID" {
				t.Fatalf("paid %v", events[4])
			}
			head := nextCheckpoint(t, s)
			if head < 5 {
				t.Fatalf("checkpoint %d below the last event delivered", head)
			}
			// Live: an event appended now arrives after the head.
			pos := e.log.Append(testEvents()[0])
			live, _ := receive(t, s, 1)
			if live[0].GetPosition() != pos || live[0].GetPosition() <= head {
				t.Fatalf("live event at %d, want %d after the head %d", live[0].GetPosition(), pos, head)
			}
		})
	}
}

// TestEventStreamFilters: activity and type filters select their events
// only, and checkpoints let the filtered subscriber advance past the rest.
func TestEventStreamFilters(t *testing.T) {
	e := startEvents(t, api.DefaultLimits(), api.DefaultServerLimits())
	e.log.Append(testEvents()...)
	c := seckillv1connect.NewEventServiceClient(e.h2c, e.base, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, withToken(&seckillv1.SubscribeRequest{ActivityId: 1,
		EventTypes: []string{"ORDER_CREATED", "ORDER_PAID"}}, scopedToken(t, 7, api.ScopeEvents)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	events, _ := receive(t, s, 2)
	if events[0].GetEventId() != "ord_a:1" || events[1].GetEventId() != "ord_a:3" {
		t.Fatalf("filtered events %s, %s; want ord_a:1, ord_a:3 (versions skip 2: it is filtered out)",
			events[0].GetEventId(), events[1].GetEventId())
	}
	// An event of activity 2 is not delivered, but the checkpoint moves
	// past it.
	pos := e.log.Append(testEvents()[1])
	for range 1000 {
		if cp := nextCheckpoint(t, s); cp == pos {
			break
		} else if cp > pos {
			t.Fatalf("checkpoint %d beyond the head %d", cp, pos)
		}
	}
	match := e.log.Append(testEvents()[4])
	live, _ := receive(t, s, 1)
	if live[0].GetPosition() != match || live[0].GetActivityId() != 1 {
		t.Fatalf("live event %v, want position %d of activity 1", live[0], match)
	}
}

// TestEventStreamBadInput: a bad request is InvalidArgument naming the
// field, before any item.
func TestEventStreamBadInput(t *testing.T) {
	e := startEvents(t, api.DefaultLimits(), api.DefaultServerLimits())
	e.log.Append(testEvents()...)
	tok := scopedToken(t, 7, api.ScopeEvents)
	for name, c := range e.clients() {
		for _, tc := range []struct {
			name  string
			req   *seckillv1.SubscribeRequest
			field string
		}{
			{"negative from_position", &seckillv1.SubscribeRequest{FromPosition: -1}, "from_position"},
			{"from_position beyond the head", &seckillv1.SubscribeRequest{FromPosition: 6}, "from_position"},
			{"negative activity_id", &seckillv1.SubscribeRequest{ActivityId: -2}, "activity_id"},
			{"unknown event type", &seckillv1.SubscribeRequest{EventTypes: []string{"ORDER_PAID", "order_paid"}}, "event_types"},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				ce := connectErr(t, streamErr(t, c, tc.req, tok), connect.CodeInvalidArgument)
				if got := fieldOf(t, ce); got != tc.field || !strings.Contains(ce.Message(), tc.field) {
					t.Fatalf("field %q, message %q; want %q", got, ce.Message(), tc.field)
				}
			})
		}
	}
}

// TestEventStreamScopes: EventService needs the events or the admin scope;
// a token with events alone may call nothing else; without an
// EventSubscriptions the service answers Unimplemented.
func TestEventStreamScopes(t *testing.T) {
	e := startEvents(t, api.DefaultLimits(), api.DefaultServerLimits())
	e.log.Append(testEvents()...)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			req := &seckillv1.SubscribeRequest{}
			wantCode(t, streamErr(t, c, req, ""), connect.CodeUnauthenticated)
			for what, tok := range map[string]string{
				"buyer":   token(t, 7, false),
				"payment": scopedToken(t, 7, api.ScopePayment),
			} {
				ce := connectErr(t, streamErr(t, c, req, tok), connect.CodePermissionDenied)
				if what == "buyer" && !strings.Contains(ce.Message(), "events or admin scope required") {
					t.Fatalf("buyer refused with %q", ce.Message())
				}
			}
			for _, tok := range []string{token(t, 7, true), scopedToken(t, 7, api.ScopeEvents)} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := c.Subscribe(ctx, withToken(req, tok))
				if err != nil {
					t.Fatal(err)
				}
				receive(t, s, 1)
				_ = s.Close()
				cancel()
			}
		})
	}
	// A token with the events scope alone may call nothing else.
	orders := seckillv1connect.NewOrderServiceClient(e.h2c, e.base)
	admin := seckillv1connect.NewAdminServiceClient(e.h2c, e.base, connect.WithGRPC())
	ctx := context.Background()
	tok := scopedToken(t, 7, api.ScopeEvents)
	_, err := orders.PlaceOrder(ctx, withToken(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 2, RequestId: "r1"}, tok))
	if ce := connectErr(t, err, connect.CodePermissionDenied); !strings.Contains(ce.Message(), "events token may call only EventService") {
		t.Fatalf("PlaceOrder with an events token: %q", ce.Message())
	}
	_, err = orders.GetOrder(ctx, withToken(&seckillv1.GetOrderRequest{OrderId: "ord_01K0YV6MGJXYJ5SKPX0DPSV8G5"}, tok))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = admin.GetStockReport(ctx, withToken(&seckillv1.GetStockReportRequest{ActivityId: 1, SkuId: 2}, tok))
	wantCode(t, err, connect.CodePermissionDenied)

	// Reflection lists the service.
	if got := listServices(t, e.h2c, e.base); !strings.Contains(got, seckillv1connect.EventServiceName) {
		t.Fatalf("reflection lists %q, missing %s", got, seckillv1connect.EventServiceName)
	}

	// Without an EventSubscriptions: Unimplemented, after authentication.
	plain := start(t)
	c := seckillv1connect.NewEventServiceClient(plain.client, plain.base, connect.WithGRPC())
	wantCode(t, streamErr(t, c, &seckillv1.SubscribeRequest{}, ""), connect.CodeUnauthenticated)
	wantCode(t, streamErr(t, c, &seckillv1.SubscribeRequest{}, token(t, 7, true)), connect.CodeUnimplemented)
}

// TestEventStreamCap: one stream beyond Limits.EventStreams is refused
// with OVERLOADED; a closed stream frees its place.
func TestEventStreamCap(t *testing.T) {
	limits := api.DefaultLimits()
	limits.EventStreams = 2
	e := startEvents(t, limits, api.DefaultServerLimits())
	e.log.Append(testEvents()...)
	c := seckillv1connect.NewEventServiceClient(e.h2c, e.base, connect.WithGRPC())
	tok := scopedToken(t, 7, api.ScopeEvents)
	open := func() (*connect.ServerStreamForClient[seckillv1.SubscribeResponse], context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := c.Subscribe(ctx, withToken(&seckillv1.SubscribeRequest{}, tok))
		if err != nil {
			t.Fatal(err)
		}
		receive(t, s, 1) // the handler holds its place once it sends
		return s, cancel
	}
	first, cancelFirst := open()
	_, cancelSecond := open()
	defer cancelSecond()
	ce := connectErr(t, streamErr(t, c, &seckillv1.SubscribeRequest{}, tok), connect.CodeResourceExhausted)
	if got := reasonOf(t, ce); got != api.ReasonOverloaded {
		t.Fatalf("reason %q, want %s", got, api.ReasonOverloaded)
	}
	// The first stream ends: its place frees once its handler returns.
	cancelFirst()
	_ = first.Close()
	for i := 0; ; i++ {
		err := streamErr(t, c, &seckillv1.SubscribeRequest{FromPosition: 6}, tok) // refused only once admitted
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			break
		}
		if reasonOf(t, connectErr(t, err, connect.CodeResourceExhausted)) != api.ReasonOverloaded || i == 200 {
			t.Fatalf("after a stream closed, a new one is refused: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEventStreamCutsSlowSubscriber: a subscriber that stops reading is
// cut off once a send does not complete within the send bound: the
// stream ends with an error before the rest of the log, and its place is
// freed (the handler returned).
func TestEventStreamCutsSlowSubscriber(t *testing.T) {
	limits := api.DefaultLimits()
	limits.EventStreams = 1
	limits.EventSendTimeout = 50 * time.Millisecond
	e := startEvents(t, limits, api.DefaultServerLimits())
	stalledSubscriberIsCut(t, e.base, e.log.Append)
}

// stallEvents is how many bigEvents the stall tests store.
const stallEvents = 2000

// bigEvents returns n events of about 8 KiB each: 2,000 of them are far
// more than a client's small HTTP/2 receive buffers (64 KiB, see
// stalledSubscriberIsCut) and the socket buffers hold.
func bigEvents(n int) []ports.EventRecord {
	big := strings.Repeat("m", 8<<10)
	recs := make([]ports.EventRecord, n)
	for i := range recs {
		recs[i] = ports.EventRecord{ActivityID: 1, Event: order.Event{OrderID: "ord_x", Version: int64(i + 1),
			Type: order.EventCreated, SchemaVersion: 1, Payload: order.Created{MessageID: big}}}
	}
	return recs
}

// stalledSubscriberIsCut subscribes to the service at base (whose log is
// empty and written by appendEvents; it allows one stream and has a short
// send bound) with 64 KiB receive buffers, takes one event, then has
// stallEvents-1 bigEvents appended and reads nothing more: the only
// stream's place must free once the server has cut the stream, and reading
// on the client finds the events that were in flight, then an error: never
// the whole log, never a clean end. (The first event is appended alone so
// that it reaches the client whatever the machine's load: a page of big
// events is cut by the send bound, and under load that may happen before
// its first frame left.)
func stalledSubscriberIsCut(t *testing.T, base string, appendEvents func(...ports.EventRecord) int64) {
	t.Helper()
	tok := scopedToken(t, 7, api.ScopeEvents)
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p, HTTP2: &http.HTTP2Config{
		MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}
	t.Cleanup(tr.CloseIdleConnections)
	c := seckillv1connect.NewEventServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Subscribe(ctx, withToken(&seckillv1.SubscribeRequest{}, tok))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	n := stallEvents
	events := bigEvents(n)
	appendEvents(events[0])
	receive(t, s, 1)
	appendEvents(events[1:]...)
	for i := 0; ; i++ {
		err := streamErr(t, c, &seckillv1.SubscribeRequest{FromPosition: int64(n) + 1}, tok)
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			break
		}
		if reasonOf(t, connectErr(t, err, connect.CodeResourceExhausted)) != api.ReasonOverloaded || i == 1000 {
			t.Fatalf("the stalled stream still holds its place: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := 1
	for s.Receive() && got <= n {
		got++
	}
	if got >= n || s.Err() == nil || errors.Is(s.Err(), io.EOF) {
		t.Fatalf("after %d of %d events the stream ended with %v, want an error before the end", got, n, s.Err())
	}
	t.Logf("cut after %d events with %v (reason %q)", got, s.Err(), api.ErrorReason(s.Err()))
}

// TestEventStreamOutlivesReadTimeout: the server's ReadTimeout bounds a
// slow request, not a long-lived stream: over HTTP/1.1 and HTTP/2 a
// stream open for several read timeouts still delivers a new event.
func TestEventStreamOutlivesReadTimeout(t *testing.T) {
	sl := api.DefaultServerLimits()
	sl.ReadTimeout = 200 * time.Millisecond
	e := startEvents(t, api.DefaultLimits(), sl)
	tok := scopedToken(t, 7, api.ScopeEvents)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := c.Subscribe(ctx, withToken(&seckillv1.SubscribeRequest{FromPosition: 0}, tok))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			// Idle checkpoints until the stream is older than four read
			// timeouts (at most 1000 of them).
			began := time.Now()
			for i := 0; time.Since(began) < 4*sl.ReadTimeout; i++ {
				if i == 1000 {
					t.Fatal("1000 checkpoints within four read timeouts")
				}
				nextCheckpoint(t, s)
			}
			pos := e.log.Append(testEvents()[0])
			ev, _ := receive(t, s, 1)
			if ev[0].GetPosition() != pos {
				t.Fatalf("event at %d, want %d", ev[0].GetPosition(), pos)
			}
		})
	}
}

// TestEventStreamEndsAtShutdown: a shutdown ends the open streams at
// once with Unavailable (resume from the last position) instead of
// holding the graceful drain until its end and resetting them.
func TestEventStreamEndsAtShutdown(t *testing.T) {
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	events := memory.NewEventLog(50 * time.Millisecond)
	events.Append(testEvents()...)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := api.NewHandler(&fakeOrders{}, &fakeAdmin{}, events, auth, log, api.DefaultLimits(), nil, api.Observability{})
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer("127.0.0.1:0", h, log, api.DefaultServerLimits())
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// A drain far longer than the test's bound: the stream must not
	// wait for it.
	go func() { done <- srv.Run(ctx, time.Minute, nil) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2, h1 := &http.Transport{Protocols: p}, &http.Transport{}
	defer h2.CloseIdleConnections()
	defer h1.CloseIdleConnections()
	base := "http://" + addr.String()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	streams := map[string]*connect.ServerStreamForClient[seckillv1.SubscribeResponse]{}
	for name, c := range map[string]seckillv1connect.EventServiceClient{
		"grpc":       seckillv1connect.NewEventServiceClient(&http.Client{Transport: h2}, base, connect.WithGRPC()),
		"connect-h1": seckillv1connect.NewEventServiceClient(&http.Client{Transport: h1}, base),
	} {
		s, err := c.Subscribe(sctx, withToken(&seckillv1.SubscribeRequest{}, scopedToken(t, 7, api.ScopeEvents)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		receive(t, s, 1)
		streams[name] = s
	}
	stop() // the shutdown begins; the server drains while the streams are read
	for name, s := range streams {
		for i := 0; s.Receive(); i++ {
			if i == 1000 {
				t.Fatalf("%s: the stream goes on after the shutdown began", name)
			}
		}
		if ce := connectErr(t, s.Err(), connect.CodeUnavailable); !strings.Contains(ce.Message(), "shutting down") {
			t.Fatalf("%s: ended with %v", name, ce)
		}
	}
}
