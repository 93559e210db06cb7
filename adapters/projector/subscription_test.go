package projector_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/projector"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

var secret = []byte("projector-test-secret-0123456789")

// noOrders and noAdmin stand for the services the EventService tests never
// call.
type noOrders struct{ ports.OrderService }

type noAdmin struct{ ports.AdminService }

// eventServer is the real API handler stack (authentication, scopes,
// EventService) over an in-memory event log, served on loopback.
type eventServer struct {
	log     *memory.EventLog
	base    string
	client  *http.Client // cleartext HTTP/2
	stop    context.CancelFunc
	stopped chan error
}

func startEventServer(t *testing.T) *eventServer {
	t.Helper()
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &eventServer{log: memory.NewEventLog(50 * time.Millisecond), stopped: make(chan error, 1)}
	h, err := api.NewHandler(noOrders{}, noAdmin{}, s.log, auth, discard, api.DefaultLimits(), nil, api.Observability{})
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer("127.0.0.1:0", h, discard, api.DefaultServerLimits())
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.stopped <- srv.Run(ctx, time.Second, nil) }()
	s.base = "http://" + addr.String()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	s.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		s.shutdown(t)
	})
	return s
}

// shutdown stops the server (streams end Unavailable) and waits for it.
func (s *eventServer) shutdown(t *testing.T) {
	t.Helper()
	s.stop()
	select {
	case err := <-s.stopped:
		if err != nil {
			t.Errorf("server: %v", err)
		}
		s.stopped <- nil
	case <-time.After(30 * time.Second):
		t.Error("server did not stop within 30s")
	}
}

// tokens hands out a token and counts how often it was asked for.
type tokens struct {
	mu    sync.Mutex
	tok   string
	asked int
}

func (k *tokens) get(context.Context) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked++
	return k.tok, nil
}

func eventsToken(t *testing.T, scopes ...string) string {
	t.Helper()
	tok, err := api.MintScopedToken(secret, 7, scopes, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// records are four events of two orders in two activities.
func records() []ports.EventRecord {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := func(orderID string, activity, v int64, p order.Payload) ports.EventRecord {
		return ports.EventRecord{ActivityID: activity, SKUID: 10 * activity, UserID: 100 + activity,
			Event: order.Event{OrderID: orderID, Version: v, Type: p.EventType(), SchemaVersion: order.CurrentSchemaVersion,
				OccurredAt: at.Add(time.Duration(v) * time.Second), Payload: p}, StoredSchemaVersion: 2}
	}
	return []ports.EventRecord{
		rec("ord_a", 1, 1, order.Created{OrderID: "ord_a", ReservationID: "rsv_a", MessageID: "msg_a", ActivityID: 1,
			SKUID: 10, UserID: 101, Quantity: 1, ReservedAt: at, ExpiresAt: at.Add(15 * time.Minute), UnitPrice: 1999, Currency: "EUR"}),
		rec("ord_b", 2, 1, order.Created{OrderID: "ord_b", ReservationID: "rsv_b", MessageID: "msg_b", ActivityID: 2,
			SKUID: 20, UserID: 102, Quantity: 1}),
		rec("ord_a", 1, 2, order.PaymentStarted{PaymentID: "pay_a"}),
		rec("ord_a", 1, 3, order.Paid{PaymentID: "pay_a"}),
	}
}

// errStop ends a Stream from its callback.
var errStop = errors.New("enough")

// TestSubscriptionStream: over Connect and gRPC, Stream sends the bearer
// token, maps the events (ids, types, payloads, positions) and the
// checkpoints (live once the head is reached), passes the request's
// filters and returns the callback's error as is; a refused token, a bad
// position and a server shutdown end it with an error carrying the
// server's code, never nil.
func TestSubscriptionStream(t *testing.T) {
	srv := startEventServer(t)
	srv.log.Append(records()...)
	clients := map[string]seckillv1connect.EventServiceClient{
		"connect": seckillv1connect.NewEventServiceClient(srv.client, srv.base),
		"grpc":    seckillv1connect.NewEventServiceClient(srv.client, srv.base, connect.WithGRPC()),
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			tok := &tokens{tok: eventsToken(t, api.ScopeEvents)}
			sub := &projector.Subscription{Client: c, Token: tok.get}
			var items []projector.Item
			err := sub.Stream(ctx, 1, func(_ context.Context, it projector.Item) error {
				items = append(items, it)
				if it.Event == nil && it.Live {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, errStop) {
				t.Fatalf("Stream returned %v, want the callback's error", err)
			}
			var evs []projector.Item
			for _, it := range items {
				if it.Event != nil {
					evs = append(evs, it)
				} else if it.Live && it.Position < 4 {
					t.Fatalf("live checkpoint at %d before the head 4", it.Position)
				}
			}
			if len(evs) != 3 || evs[0].Position != 2 || evs[1].Position != 3 || evs[2].Position != 4 {
				t.Fatalf("events %v, want positions 2, 3, 4 (after from 1)", items)
			}
			b := evs[0].Event
			if b.GetPosition() != 2 || b.GetEventId() != "ord_b:1" || b.GetOrderId() != "ord_b" || b.GetActivityId() != 2 ||
				b.GetEventType() != "ORDER_CREATED" || b.GetCreated().GetReservationId() != "rsv_b" {
				t.Fatalf("first event %v", b)
			}
			if evs[2].Event.GetPaid().GetPaymentId() != "pay_a" || evs[2].Live {
				t.Fatalf("last event %+v", evs[2])
			}
			if last := items[len(items)-1]; last.Event != nil || !last.Live || last.Position < 4 {
				t.Fatalf("last item %+v, want a live checkpoint at the head", last)
			}
			if tok.asked != 1 {
				t.Fatalf("token asked %d times, want once per subscribe", tok.asked)
			}

			// Filters: activity 1's ORDER_PAID only.
			sub.ActivityID, sub.EventTypes = 1, []string{"ORDER_PAID"}
			items = nil
			err = sub.Stream(ctx, 0, func(_ context.Context, it projector.Item) error {
				items = append(items, it)
				if it.Live {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, errStop) {
				t.Fatal(err)
			}
			var ids []string
			for _, it := range items {
				if it.Event != nil {
					ids = append(ids, it.Event.GetEventId())
				}
			}
			if len(ids) != 1 || ids[0] != "ord_a:3" {
				t.Fatalf("filtered events %v, want ord_a:3", ids)
			}

			// Errors of the server: a buyer's token, a position beyond
			// the head.
			never := func(context.Context, projector.Item) error { t.Error("an item on a refused stream"); return nil }
			buyer := &projector.Subscription{Client: c, Token: (&tokens{tok: eventsToken(t, "buyer")}).get}
			if err := buyer.Stream(ctx, 0, never); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("a buyer's token: %v, want PermissionDenied", err)
			}
			none := &projector.Subscription{Client: c, Token: (&tokens{}).get}
			if err := none.Stream(ctx, 0, never); connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("no token: %v, want Unauthenticated", err)
			}
			if err := sub.Stream(ctx, 1000, never); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("from beyond the head: %v, want InvalidArgument", err)
			}
		})
	}
	t.Run("shutdown", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		sub := &projector.Subscription{Client: clients["grpc"], Token: (&tokens{tok: eventsToken(t, api.ScopeEvents)}).get}
		live := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			once := sync.OnceFunc(func() { close(live) })
			done <- sub.Stream(ctx, 0, func(_ context.Context, it projector.Item) error {
				if it.Live {
					once()
				}
				return nil
			})
		}()
		select {
		case <-live:
		case err := <-done:
			t.Fatalf("Stream ended before its live checkpoint: %v", err)
		}
		srv.shutdown(t)
		select {
		case err := <-done:
			if err == nil || connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("Stream at the server's shutdown returned %v, want an Unavailable error", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Stream did not end within 20s of the server's shutdown")
		}
	})
}

// TestSubscriptionEndsWithContext: Stream returns nil when its context
// ends, and a clear error without a client or a token function.
func TestSubscriptionEndsWithContext(t *testing.T) {
	srv := startEventServer(t)
	srv.log.Append(records()...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := &projector.Subscription{Client: seckillv1connect.NewEventServiceClient(srv.client, srv.base),
		Token: (&tokens{tok: eventsToken(t, api.ScopeEvents)}).get}
	if err := sub.Stream(ctx, 0, func(_ context.Context, it projector.Item) error {
		if it.Live {
			cancel()
		}
		return nil
	}); err != nil {
		t.Fatalf("Stream after its context ended: %v, want nil", err)
	}
	if err := (&projector.Subscription{Token: sub.Token}).Stream(context.Background(), 0, nil); err == nil {
		t.Fatal("Stream without a client: nil error")
	}
	if err := (&projector.Subscription{Client: sub.Client}).Stream(context.Background(), 0, nil); err == nil {
		t.Fatal("Stream without a token function: nil error")
	}
}

// TestRunOverSubscription: Run over a Subscription to the real
// EventService builds the view from the log, becomes active at the live
// checkpoint and follows a new event with its side effect, each event
// applied once, in order.
func TestRunOverSubscription(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	srv := startEventServer(t)
	srv.log.Append(records()...)
	sub := &projector.Subscription{Client: seckillv1connect.NewEventServiceClient(srv.client, srv.base, connect.WithGRPC()),
		Token: (&tokens{tok: eventsToken(t, api.ScopeEvents)}).get}
	h := newCounter()
	r := start(t, sub, h, store, options("e2e", 1))
	eventually(t, "version 1 active", func() bool { v, ok, err := store.Active(ctx, "e2e"); return err == nil && ok && v == 1 })
	if got := h.afterCommits(); len(got) != 0 {
		t.Fatalf("AfterCommit during the replay of history: %v", got)
	}
	srv.log.Append(records()[1]) // position 5
	eventually(t, "checkpoint at 5", func() bool { return position(t, store, "e2e", 1) >= 5 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	view := projector.View{Name: "e2e", Version: 1}
	if got := appliedIDs(t, pool, view); len(got) != 5 || got[0] != "ord_a:1" || got[4] != "ord_b:1" {
		t.Fatalf("applied %v, want the five events in order", got)
	}
	if got := h.afterCommits(); len(got) != 1 || got[0] != "v1:ord_b:1" {
		t.Fatalf("AfterCommit %v, want only the event after the switch", got)
	}
	if c := counts(t, pool, view); c["ord_a"] != 3 || c["ord_b"] != 2 {
		t.Fatalf("counts %v", c)
	}
}

// TestRunStopsWhenRefused: a token the service refuses (a buyer's, no
// events scope) and a filter it does not know end Run with the service's
// error instead of resubscribing for ever.
func TestRunStopsWhenRefused(t *testing.T) {
	_, store := newStore(t)
	srv := startEventServer(t)
	srv.log.Append(records()...)
	client := seckillv1connect.NewEventServiceClient(srv.client, srv.base, connect.WithGRPC())
	for _, c := range []struct {
		name string
		sub  *projector.Subscription
		code connect.Code
	}{
		{"buyer token", &projector.Subscription{Client: client, Token: (&tokens{tok: eventsToken(t)}).get}, connect.CodePermissionDenied},
		{"unknown type", &projector.Subscription{Client: client, Token: (&tokens{tok: eventsToken(t, api.ScopeEvents)}).get,
			EventTypes: []string{"ORDER_SHIPPED"}}, connect.CodeInvalidArgument},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := projector.Run(ctx, c.sub, newCounter(), store, options("refused", 1))
		cancel()
		if connect.CodeOf(err) != c.code {
			t.Fatalf("%s: Run = %v, want %v", c.name, err, c.code)
		}
	}
}
