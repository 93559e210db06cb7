package bootstrap_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// TestFlashSaleThroughTheAPI is the acceptance scenario of the hot path:
// 1,000 units, 3,000 buyers who each send the same request twice at the
// same time, through the Connect API, with the consumer running: exactly
// 1,000 reservations and 1,000 orders, at most one per buyer, and every
// retried request_id answers with the same order id.
func TestFlashSaleThroughTheAPI(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		const activity, stock, buyers = 1, 1000, 3000
		s.activity(activity, stock, 15*time.Minute, 5*time.Minute)

		// The API's edge behaviour on the real server.
		_, err := s.orders.PlaceOrder(context.Background(), connect.NewRequest(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 1, RequestId: "x"}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("no token: %v", err)
		}
		if _, err := s.place(context.Background(), 1, activity, ""); connect.CodeOf(err) != connect.CodeInvalidArgument ||
			!strings.Contains(err.Error(), "request_id") {
			t.Fatalf("empty request_id: %v", err)
		}
		if _, err := s.admin.GetStockReport(context.Background(), authed(&seckillv1.GetStockReportRequest{ActivityId: 1, SkuId: 1},
			s.token(5, false))); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("admin call with a user token: %v", err)
		}

		var (
			mu       sync.Mutex
			orderOf  = map[int64]string{}
			won      int
			soldOut  int
			mismatch int
			failures []error
		)
		concurrently(buyers*2, 64, func(i int) {
			user := int64(10_000 + i/2)
			res, err := s.place(context.Background(), user, activity, fmt.Sprintf("buy-%d", user))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if prev, ok := orderOf[user]; ok {
					if prev != res.GetOrderId() {
						mismatch++
					}
					return
				}
				orderOf[user] = res.GetOrderId()
				won++
			case api.ErrorReason(err) == "SOLD_OUT":
				soldOut++
			default:
				failures = append(failures, err)
			}
		})
		if len(failures) > 0 {
			t.Fatalf("%d unexpected failures, first: %v", len(failures), failures[0])
		}
		if won != stock || mismatch != 0 {
			t.Fatalf("buyers with a reservation %d (want %d), retries answered with another order id %d", won, stock, mismatch)
		}
		t.Logf("reservations %d, sold-out answers %d", won, soldOut)
		s.invariants(activity)
		if n := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity); n != stock {
			t.Fatalf("orders %d, want %d", n, stock)
		}
		// Every acknowledged buyer sees their order.
		for user, id := range orderOf {
			o, err := s.getOrder(user, id)
			if err != nil || o.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_CREATED {
				t.Fatalf("GetOrder(%d, %s) = %v, %v", user, id, o, err)
			}
			break
		}
	})
}

// TestCrashAfterReserveBeforeSend: the process dies after the Redis
// reservation and before the send; the scanner sends the message with the
// reservation's message id and exactly one order results.
func TestCrashAfterReserveBeforeSend(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker, configure: func(c *config.Config) { c.Failpoints = "placeorder.after_reserve=error" }})
		s.activity(2, 10, time.Minute, time.Minute)
		if _, err := s.place(context.Background(), 77, 2, "crash-1"); err == nil {
			t.Fatal("the request that crashed must not succeed")
		}
		if got := s.app.Failpoints.Hits(ports.FailAfterReserve); got != 1 {
			t.Fatalf("failpoint hits %d", got)
		}
		s.app.Failpoints.Clear(ports.FailAfterReserve)
		s.eventually(30*time.Second, "the scanner creates the order", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE activity_id = 2`) == 1
		})
		s.invariants(2)
		// The retried request finds the same reservation.
		res, err := s.place(context.Background(), 77, 2, "crash-1")
		if err != nil || res.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_CREATED {
			t.Fatalf("retry after recovery: %v %v", res, err)
		}
	})
}

// TestBlackholedBrokerRepliesAreResent: the broker's replies are lost (a
// fault proxy between the service and the broker holds them); the send is
// UNKNOWN, the client still gets QUEUING, the scanner resends with the
// same message id, and exactly one order results.
func TestBlackholedBrokerRepliesAreResent(t *testing.T) {
	var proxy *faultproxy.Proxy
	s := startSystem(t, options{beforeRun: brokerThroughProxy(t, &proxy)})
	s.activity(3, 10, time.Minute, time.Minute)
	proxy.SetBlackhole()
	res, err := s.place(context.Background(), 88, 3, "blackhole-1")
	if err != nil || res.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_QUEUING {
		t.Fatalf("unknown send must answer QUEUING: %v %v", res, err)
	}
	proxy.SetPass()
	s.eventually(60*time.Second, "the order is created", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE activity_id = 3`) == 1
	})
	s.invariants(3)
	if n := s.count(`SELECT count(*) FROM consumer_inbox WHERE consumer_group LIKE '%ORDER_CREATE_PG_V1'`); n != 1 {
		t.Fatalf("inbox rows %d: one message id however often it was sent", n)
	}
}

// TestMissingTopicIsADefiniteFailure: with the order-create topic missing
// every send definitely fails; the reservation is released at once (one
// release) and the stock is back.
func TestMissingTopicIsADefiniteFailure(t *testing.T) {
	// A generous send bound: the broker's answer for a topic deleted a
	// moment ago can take longer than the suite's 500 ms (the proxy's route
	// cache still names it), and a send cut by the bound is UNKNOWN, not
	// the definite failure this test is about.
	s := startSystem(t, options{configure: func(c *config.Config) { c.Broker.Neutral.SendTimeout = 5 * time.Second }, beforeRun: func(s *system) {
		topic, err := rocketmq.Config{TopicPrefix: s.broker.Prefix()}.Topic(ports.TopicOrderCreate)
		if err != nil {
			t.Fatal(err)
		}
		admin := rocketmq.NewAdmin(os.Getenv("SECKILL_ROCKETMQ_BROKER"), os.Getenv("SECKILL_ROCKETMQ_NAMESRV"), 5*time.Second)
		if err := admin.DeleteTopic(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
	}})
	s.activity(4, 5, time.Minute, time.Minute)
	_, err := s.place(context.Background(), 99, 4, "missing-topic")
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("definite failure must answer Unavailable: %v", err)
	}
	rep := s.report(4)
	if rep.GetRedisAvailable() != 5 || rep.GetPendingReservations() != 0 || rep.GetDrift() != 0 {
		t.Fatalf("stock not restored: %v", rep)
	}
	// The same request id now reports the rejection; no second release.
	res, err := s.place(context.Background(), 99, 4, "missing-topic")
	if err != nil || res.GetStatus() != seckillv1.OrderStatus_ORDER_STATUS_REJECTED {
		t.Fatalf("retry of the failed request: %v %v", res, err)
	}
	if rep := s.report(4); rep.GetRedisAvailable() != 5 {
		t.Fatalf("released twice: %v", rep)
	}
	o, err := s.getOrder(99, res.GetOrderId())
	if err != nil || o.GetReason() != "SEND_FAILED" {
		t.Fatalf("GetOrder of the failed reservation: %v %v", o, err)
	}
}

// TestBacklogClosesAdmission: with the consumer stopped, reservations age;
// once the oldest passes half its validity, PlaceOrder answers
// ResourceExhausted BACKLOG without touching stock.
func TestBacklogClosesAdmission(t *testing.T) {
	s := startSystem(t, options{noConsumer: true, configure: func(c *config.Config) { c.Orders.BacklogCloseRatio = 0.5 }})
	s.activity(5, 1000, time.Minute, 2*time.Second)
	if _, err := s.place(context.Background(), 1, 5, "b-1"); err != nil {
		t.Fatal(err)
	}
	admitted := int64(1)
	var err error
	user := int64(2)
	s.eventually(20*time.Second, "admission closes", func() bool {
		user++
		_, err = s.place(context.Background(), user, 5, fmt.Sprintf("b-%d", user))
		if err == nil {
			admitted++
		}
		return err != nil
	})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || api.ErrorReason(err) != "BACKLOG" {
		t.Fatalf("closed admission answered %v", err)
	}
	for i := 0; i < 5; i++ {
		user++
		if _, err := s.place(context.Background(), user, 5, fmt.Sprintf("b-%d", user)); api.ErrorReason(err) != "BACKLOG" {
			t.Fatalf("admission reopened: %v", err)
		}
	}
	if rep := s.report(5); rep.GetRedisAvailable() != 1000-admitted {
		t.Fatalf("refused requests touched stock: %d admitted, report %v", admitted, rep)
	}
}
