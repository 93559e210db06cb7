package bootstrap_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// eventStream is one EventService.Subscribe stream over gRPC, read by a
// goroutine the test owns (ended and awaited at cleanup).
type eventStream struct {
	mu          sync.Mutex
	events      []*seckillv1.OrderEvent
	checkpoints []int64
	err         error // why the stream ended, if it did
}

func (s *system) subscribeEvents(from int64) *eventStream {
	s.t.Helper()
	tok, err := api.MintScopedToken([]byte(s.cfg.AuthSecret), 900_000_002, []string{api.ScopeEvents}, time.Hour, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	client := seckillv1connect.NewEventServiceClient(s.http, s.base, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	stream, err := client.Subscribe(ctx, authed(&seckillv1.SubscribeRequest{FromPosition: from}, tok))
	if err != nil {
		cancel()
		s.t.Fatalf("subscribe: %v", err)
	}
	es := &eventStream{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for stream.Receive() {
			m := stream.Msg()
			es.mu.Lock()
			if e := m.GetEvent(); e != nil {
				es.events = append(es.events, e)
			} else if c := m.GetCheckpoint(); c != nil {
				es.checkpoints = append(es.checkpoints, c.GetPosition())
			}
			es.mu.Unlock()
		}
		es.mu.Lock()
		es.err = stream.Err()
		if es.err == nil {
			es.err = errors.New("stream ended")
		}
		es.mu.Unlock()
	})
	s.t.Cleanup(func() { cancel(); _ = stream.Close(); wg.Wait() })
	return es
}

// snapshot returns a copy of what the stream received so far.
func (es *eventStream) snapshot() ([]*seckillv1.OrderEvent, error) {
	es.mu.Lock()
	defer es.mu.Unlock()
	return slices.Clone(es.events), es.err
}

// storedEvents returns the event ids of order_events, the store's truth.
func (s *system) storedEvents() map[string]bool {
	s.t.Helper()
	rows, err := s.db.Query(context.Background(), `SELECT aggregate_id, aggregate_version FROM order_events`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			s.t.Fatal(err)
		}
		out[fmt.Sprintf("%s:%d", id, v)] = true
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// TestEventSubscriptionMidSale: a subscription from position 0 started in
// the middle of a sale (orders before it, more orders, a payment and a
// buyer cancel after it) switches from catch-up to live and receives, with
// positions strictly increasing, exactly the events of order_events: each
// once, each order's versions in order. A second subscription from a
// position in the middle receives exactly what follows it.
func TestEventSubscriptionMidSale(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		s.activity(41, 20, time.Minute, time.Minute)
		var ids []string
		for u := int64(1); u <= 4; u++ {
			ids = append(ids, s.buy(u, 41, fmt.Sprintf("before-%d", u)))
		}
		es := s.subscribeEvents(0)
		concurrently(6, 6, func(i int) {
			if _, err := s.place(context.Background(), int64(10+i), 41, fmt.Sprintf("during-%d", i)); err != nil {
				t.Errorf("place: %v", err)
			}
		})
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: ids[0], PaymentId: "pay-e2e"},
			s.paymentToken())); err != nil {
			t.Fatalf("pay: %v", err)
		}
		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: ids[1]},
			s.token(2, false))); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		// 10 orders created, 1 paid (2 events), 1 canceled: 13 events.
		s.eventually(60*time.Second, "every order is created", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE activity_id = 41`) == 10
		})
		want := s.storedEvents()
		if len(want) != 13 {
			t.Fatalf("order_events holds %d events, want 13", len(want))
		}
		s.eventually(60*time.Second, "the subscription received every stored event", func() bool {
			evs, err := es.snapshot()
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			return len(evs) >= len(want)
		})
		evs, _ := es.snapshot()
		got := map[string]bool{}
		versions := map[string]int64{}
		last := int64(0)
		for _, e := range evs {
			if e.GetPosition() <= last {
				t.Fatalf("position %d after %d: not strictly increasing", e.GetPosition(), last)
			}
			last = e.GetPosition()
			if got[e.GetEventId()] {
				t.Fatalf("%s delivered twice", e.GetEventId())
			}
			got[e.GetEventId()] = true
			if v := versions[e.GetOrderId()]; e.GetAggregateVersion() != v+1 {
				t.Fatalf("%s after version %d of its order", e.GetEventId(), v)
			}
			versions[e.GetOrderId()] = e.GetAggregateVersion()
			if e.GetActivityId() != 41 || e.GetEventId() != fmt.Sprintf("%s:%d", e.GetOrderId(), e.GetAggregateVersion()) {
				t.Fatalf("event %+v", e)
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("received %v\nstored   %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		if n := s.count(`SELECT count(*) FROM event_log`); n != int64(len(want)) || last != n {
			t.Fatalf("event_log has %d rows, last position %d; want %d and the same", n, last, len(want))
		}

		mid := evs[5].GetPosition()
		es2 := s.subscribeEvents(mid)
		s.eventually(30*time.Second, "the second subscription caught up", func() bool {
			e2, err := es2.snapshot()
			if err != nil {
				t.Fatalf("second stream ended: %v", err)
			}
			return len(e2) >= len(evs)-6
		})
		e2, _ := es2.snapshot()
		for i, e := range e2 {
			if e.GetEventId() != evs[6+i].GetEventId() || e.GetPosition() != evs[6+i].GetPosition() {
				t.Fatalf("from %d: item %d is %s at %d, want %s at %d", mid, i, e.GetEventId(), e.GetPosition(),
					evs[6+i].GetEventId(), evs[6+i].GetPosition())
			}
		}
		if len(e2) != len(evs)-6 {
			t.Fatalf("from %d: %d events, want %d", mid, len(e2), len(evs)-6)
		}
	})
}
