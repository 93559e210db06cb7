package bootstrap_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// buy places an order and waits until it is CREATED.
func (s *system) buy(user, activity int64, requestID string) string {
	s.t.Helper()
	res, err := s.place(context.Background(), user, activity, requestID)
	if err != nil {
		s.t.Fatal(err)
	}
	s.eventually(30*time.Second, "order "+res.GetOrderId()+" is created", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE order_id = $1`, res.GetOrderId()) == 1
	})
	return res.GetOrderId()
}

// TestPayAndCancelRace: 100 payments and 100 cancellations of one order at
// once; exactly one kind wins and a paid order is never canceled (I5).
func TestPayAndCancelRace(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		s.activity(20, 5, time.Minute, time.Minute)
		id := s.buy(1, 20, "race")
		var mu sync.Mutex
		paid, canceled := 0, 0
		payer := s.paymentToken()
		concurrently(200, 32, func(i int) {
			tok := s.token(1, false)
			var err error
			if i%2 == 0 {
				_, err = s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: id, PaymentId: "pay-1"}, payer))
				if err == nil {
					mu.Lock()
					paid++
					mu.Unlock()
				}
			} else {
				var res *connect.Response[seckillv1.CancelOrderResponse]
				res, err = s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: id}, tok))
				if err == nil && res.Msg.GetOrder().GetStatus() == seckillv1.OrderStatus_ORDER_STATUS_CANCELED {
					mu.Lock()
					canceled++
					mu.Unlock()
				}
			}
			if err != nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("unexpected error: %v", err)
			}
		})
		if (paid > 0) == (canceled > 0) {
			t.Fatalf("paid %d and canceled %d: exactly one side must win", paid, canceled)
		}
		t.Logf("winner: paid=%d canceled=%d (successful calls of the winning side)", paid, canceled)
		s.invariants(20)
	})
}

// TestHalfPayHalfTimeout: a 200-unit sale where half the buyers pay and
// half let the payment time out ends with I1-I7 holding and the timed-out
// half back in Redis stock.
func TestHalfPayHalfTimeout(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		const activity, n = 21, 200
		s.activity(activity, n, 4*time.Second, time.Minute)
		ids := make([]string, n)
		concurrently(n, 32, func(i int) {
			res, err := s.place(context.Background(), int64(1000+i), activity, fmt.Sprintf("half-%d", i))
			if err != nil {
				t.Errorf("place %d: %v", i, err)
				return
			}
			ids[i] = res.GetOrderId()
		})
		s.eventually(60*time.Second, "all orders exist", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity) == n
		})
		// The payment side confirms the first half. A confirmation that
		// arrives at or after an order's deadline (a slow machine) is refused
		// with PAYMENT_EXPIRED, or with ORDER_NOT_PAYABLE when the timeout
		// canceled the order first, and that order times out like the
		// other half (the counts below hold either way).
		payer := s.paymentToken()
		var expired atomic.Int64
		concurrently(n/2, 16, func(i int) {
			_, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{
				OrderId: ids[i], PaymentId: fmt.Sprintf("pay-%d", i)}, payer))
			if reason := api.ErrorReason(err); err != nil && (reason == "PAYMENT_EXPIRED" || reason == "ORDER_NOT_PAYABLE") {
				expired.Add(1)
			} else if err != nil {
				t.Errorf("pay %d: %v", i, err)
			}
		})
		unpaid := int64(n/2) + expired.Load()
		s.eventually(90*time.Second, "every unpaid order is canceled", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'CANCELED'`, activity) == unpaid
		})
		s.invariants(activity)
		rep := s.report(activity)
		if rep.GetRedisAvailable() != unpaid || rep.GetNonCanceledOrders() != n-unpaid {
			t.Fatalf("report %v: the %d canceled orders must be back in Redis stock", rep, unpaid)
		}
		paid := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'PAID'`, activity)
		releases := s.count(`SELECT count(*) FROM inventory_ledger WHERE activity_id = $1 AND reason = 'ORDER_CANCELED'`, activity)
		t.Logf("orders paid %d, canceled %d (%d payments came too late), releases applied %d", paid, unpaid, expired.Load(), releases)
		if paid != n-unpaid || releases != unpaid {
			t.Fatalf("paid %d releases %d", paid, releases)
		}
	})
}

// TestTimeoutMessagesEarlyLateAndRepeated: a timeout check that arrives
// before the deadline changes nothing (and is redelivered), one after it
// cancels, and repeats are no-ops; the stock is released once.
func TestTimeoutMessagesEarlyLateAndRepeated(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		s.activity(22, 5, 6*time.Second, time.Minute)
		id := s.buy(7, 22, "timeout")
		var rsv string
		if err := s.db.QueryRow(context.Background(), `SELECT reservation_id FROM orders WHERE order_id = $1`, id).Scan(&rsv); err != nil {
			t.Fatal(err)
		}
		early := message.CancelOrderIfUnpaid{Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeCancelOrderIfUnpaid,
			MessageID: "evt_early_check", MessageKey: id, CreatedAt: time.Now()},
			OrderID: id, ReservationID: rsv, ActivityID: 22, SKUID: 1, UserID: 7, DeliverAt: time.Now()}
		body, err := early.Encode()
		if err != nil {
			t.Fatal(err)
		}
		s.publishRaw(ports.TopicOrderTimeout, early.MessageID, body)
		time.Sleep(2 * time.Second)
		if st := s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'CREATED'`, id); st != 1 {
			t.Fatal("an early check canceled the order")
		}
		s.eventually(60*time.Second, "the order is canceled after its deadline", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'CANCELED'`, id) == 1
		})
		// Three late repeats of the real timeout message.
		var realBody []byte
		if err := s.db.QueryRow(context.Background(), `SELECT body FROM event_outbox WHERE message_id = $1`, "evt_"+id+"_timeout_1").Scan(&realBody); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			s.publishRaw(ports.TopicOrderTimeout, "evt_"+id+"_timeout_1", realBody)
		}
		s.invariants(22)
		if n := s.count(`SELECT count(*) FROM inventory_ledger WHERE order_id = $1 AND reason = 'ORDER_CANCELED'`, id); n != 1 {
			t.Fatalf("cancel ledger rows %d", n)
		}
		// Both distinct checks end up in the timeout group's inbox (one canceled,
		// the other found the order canceled); the repeats add nothing.
		s.eventually(30*time.Second, "both timeout checks are recorded", func() bool {
			return s.count(`SELECT count(*) FROM consumer_inbox WHERE consumer_group LIKE '%ORDER_TIMEOUT_V1' AND status <> 'PROCESSING'`) == 2
		})
		t.Logf("timeout checks: 1 early (no-op, redelivered), 1 on time, 3 late repeats; cancels applied %d, inbox rows 2",
			s.count(`SELECT count(*) FROM order_events WHERE aggregate_id = $1 AND event_type = 'ORDER_CANCELED'`, id))
		if rep := s.report(22); rep.GetRedisAvailable() != 5 {
			t.Fatalf("released unit not back exactly once: %v", rep)
		}
	})
}

// TestCompensationDeliveredTwiceAndReplayed: a compensation task delivered
// twice and then replayed releases the reservation once (I4).
func TestCompensationDeliveredTwiceAndReplayed(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		s.activity(23, 3, time.Minute, time.Minute)
		id := s.buy(9, 23, "comp")
		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: id}, s.token(9, false))); err != nil {
			t.Fatal(err)
		}
		s.invariants(23)
		var body []byte
		if err := s.db.QueryRow(context.Background(), `SELECT body FROM event_outbox WHERE tag = 'RELEASE_RESERVATION'`).Scan(&body); err != nil {
			t.Fatal(err)
		}
		m, err := message.DecodeReleaseReservation(body)
		if err != nil {
			t.Fatal(err)
		}
		s.publishRaw(ports.TopicInventoryCompensate, m.MessageID, body)
		s.publishRaw(ports.TopicInventoryCompensate, m.MessageID, body)
		replayed, _, err := message.WithReplay(body, "rpl_test")
		if err != nil {
			t.Fatal(err)
		}
		s.publishRaw(ports.TopicInventoryCompensate, m.MessageID, replayed)
		s.eventually(30*time.Second, "the consumer handled the 2 duplicates and the replay", func() bool {
			return s.metric("compensation_total", `result="duplicate"`) >= 3
		})
		if n := s.metric("compensation_total", `result="applied"`); n != 1 {
			t.Fatalf("releases applied %v, want 1", n)
		}
		if rep := s.report(23); rep.GetRedisAvailable() != 3 || rep.GetDrift() != 0 {
			t.Fatalf("stock after duplicate compensations: %v", rep)
		}
		t.Logf("compensation deliveries: 1 from the relay + 2 duplicates + 1 replay; releases applied: %d (Redis available %d of 3)",
			s.count(`SELECT count(*) FROM inventory_ledger WHERE reason = 'ORDER_CANCELED'`), s.report(23).GetRedisAvailable())
	})
}

// TestRelayCrashAfterPublishBeforeMark: the relay publishes and dies
// before marking the rows; they are published again with the same message
// ids and downstream effects happen once.
func TestRelayCrashAfterPublishBeforeMark(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker, configure: func(c *config.Config) {
			c.Failpoints = "relay.after_publish=error"
		}})
		s.activity(24, 5, 3*time.Second, time.Minute)
		res, err := s.place(context.Background(), 3, 24, "relay")
		if err != nil {
			t.Fatal(err)
		}
		s.eventually(30*time.Second, "the relay published at least twice", func() bool {
			return s.app.Failpoints.Hits(ports.FailRelayAfterPublish) >= 2
		})
		s.app.Failpoints.Clear(ports.FailRelayAfterPublish)
		s.eventually(60*time.Second, "the unpaid order times out", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'CANCELED'`, res.GetOrderId()) == 1
		})
		s.invariants(24)
		if n := s.count(`SELECT count(*) FROM consumer_inbox WHERE consumer_group LIKE '%AUDIT_V1' AND order_id = $1`, res.GetOrderId()); n != 2 {
			t.Fatalf("audit inbox rows %d: ORDER_CREATED and ORDER_CANCELED once each", n)
		}
		t.Logf("relay crashed after publishing %d times; effects: audit records 2, cancels 1", s.app.Failpoints.Hits(ports.FailRelayAfterPublish))
	})
}

// TestTraceContextTravelsWithTheOrder: the caller's W3C trace id comes back
// in the response and is carried by every message produced for the order.
func TestTraceContextTravelsWithTheOrder(t *testing.T) {
	s := startSystem(t, options{})
	s.activity(25, 5, time.Minute, time.Minute)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := authed(&seckillv1.PlaceOrderRequest{ActivityId: 25, SkuId: 1, RequestId: "traced"}, s.token(6, false))
	req.Header().Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	res, err := s.orders.PlaceOrder(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Header().Get("traceparent"); len(got) != 55 || got[3:35] != traceID {
		t.Fatalf("response traceparent %q", got)
	}
	s.eventually(30*time.Second, "the order's messages are written", func() bool {
		return s.count(`SELECT count(*) FROM event_outbox WHERE keys[1] = $1`, res.Msg.GetOrderId()) >= 3
	})
	if n := s.count(`SELECT count(*) FROM event_outbox WHERE keys[1] = $1 AND position($2 in convert_from(body, 'UTF8')) = 0`,
		res.Msg.GetOrderId(), traceID); n != 0 {
		t.Fatalf("%d messages of the order lost the trace id", n)
	}
}
