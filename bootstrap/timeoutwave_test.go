package bootstrap_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// TestTimeoutWave: a sale's unpaid orders expire together. One order is
// paid by the payment side at the last moment before its deadline and one
// is canceled by its buyer; when the wave is handled (batched timeout
// checks, batched releases), exactly those two are left alone by the
// timeout consumer, every other unit is released once and is for sale in
// Redis again, and I1-I7 hold.
func TestTimeoutWave(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		const activity, n = 30, 60
		s.activity(activity, n, 8*time.Second, time.Minute)
		ids := make([]string, n)
		concurrently(n, 16, func(i int) {
			res, err := s.place(context.Background(), int64(3000+i), activity, fmt.Sprintf("wave-%d", i))
			if err != nil {
				t.Errorf("place %d: %v", i, err)
				return
			}
			ids[i] = res.GetOrderId()
		})
		if t.Failed() {
			t.FailNow()
		}
		s.eventually(60*time.Second, "all orders exist", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'CREATED'`, activity) == n
		})
		paid, buyerCanceled := ids[0], ids[1]
		// The buyer cancels first: each order's deadline counts from its
		// creation, and an order whose first send was not confirmed is
		// created later than the others (its deadline is later too), so
		// waiting for the paid order's last moment could pass this one's.
		if _, err := s.orders.CancelOrder(context.Background(), authed(&seckillv1.CancelOrderRequest{OrderId: buyerCanceled}, s.token(3001, false))); err != nil {
			t.Fatalf("buyer cancel: %v", err)
		}
		var expiresAt time.Time
		if err := s.db.QueryRow(context.Background(), `SELECT expires_at FROM orders WHERE order_id = $1`, paid).Scan(&expiresAt); err != nil {
			t.Fatal(err)
		}
		// The last moment: two seconds before the deadline of the database
		// clock (the same machine's clock here).
		time.Sleep(time.Until(expiresAt.Add(-2 * time.Second)))
		_, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: paid, PaymentId: "pay-wave"}, s.token(3000, false)))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("PayOrder with the buyer's own token: %v, want PermissionDenied (payments come from the payment side)", err)
		}
		if _, err := s.orders.PayOrder(context.Background(), authed(&seckillv1.PayOrderRequest{OrderId: paid, PaymentId: "pay-wave"}, s.paymentToken())); err != nil {
			t.Fatalf("payment 2s before the deadline: %v", err)
		}

		s.eventually(90*time.Second, "every unpaid order is canceled", func() bool {
			return s.count(`SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'CANCELED'`, activity) == n-1
		})
		s.invariants(activity)

		if st := s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND status = 'PAID'`, paid); st != 1 {
			t.Fatal("the order paid at the last moment is not PAID")
		}
		if c := s.count(`SELECT count(*) FROM orders WHERE order_id = $1 AND cancel_reason = 'BUYER_CANCELED'`, buyerCanceled); c != 1 {
			t.Fatal("the buyer's cancel was overwritten")
		}
		if c := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1 AND cancel_reason = 'PAYMENT_TIMEOUT'`, activity); c != n-2 {
			t.Fatalf("%d orders canceled by the timeout, want %d", c, n-2)
		}
		if c := s.count(`SELECT count(*) FROM order_events WHERE aggregate_id = ANY($1) AND event_type = 'ORDER_CANCELED'`,
			[]string{paid, buyerCanceled}); c != 1 {
			t.Fatalf("%d cancel events for the paid and the buyer-canceled order, want the buyer's only", c)
		}
		releases := s.count(`SELECT count(*) FROM inventory_ledger WHERE activity_id = $1 AND reason = 'ORDER_CANCELED'`, activity)
		if releases != n-1 || s.count(`SELECT count(*) FROM inventory_ledger WHERE order_id = $1 AND reason = 'ORDER_CANCELED'`, paid) != 0 {
			t.Fatalf("%d units returned in PostgreSQL, want %d and none for the paid order", releases, n-1)
		}
		rep := s.report(activity)
		if rep.GetRedisAvailable() != n-1 || rep.GetNonCanceledOrders() != 1 {
			t.Fatalf("report %v: the %d canceled units must be for sale again in Redis", rep, n-1)
		}
		s.eventually(30*time.Second, "every release is counted", func() bool {
			return s.metric("compensation_total", `result="applied"`) >= n-1
		})
		if applied := s.metric("compensation_total", `result="applied"`); applied != n-1 {
			t.Fatalf("%v releases applied in Redis, want exactly %d (once per canceled unit)", applied, n-1)
		}
		for i, id := range ids {
			var rsv string
			if err := s.db.QueryRow(context.Background(), `SELECT reservation_id FROM orders WHERE order_id = $1`, id).Scan(&rsv); err != nil {
				t.Fatal(err)
			}
			status, err := s.redis.HGet(context.Background(), fmt.Sprintf("%s:{a%d:s1}:rsv:%s", s.ns, activity, rsv), "status").Result()
			if err != nil {
				t.Fatal(err)
			}
			want := "RELEASED"
			if id == paid {
				want = "ORDERED"
			}
			if status != want {
				t.Fatalf("reservation of order %d (%s) is %s in Redis, want %s", i, id, status, want)
			}
		}
		batches := s.count(`SELECT count(DISTINCT updated_at) FROM consumer_inbox WHERE consumer_group LIKE '%ORDER_TIMEOUT_V1' AND status <> 'PROCESSING'`)
		t.Logf("timeout checks of %d orders recorded by %d transactions; outcomes: canceled %v, paid %v, already canceled %v",
			n, batches, s.metric("cancel_outcome_total", `outcome="CANCELED"`), s.metric("cancel_outcome_total", `outcome="NOOP_PAID"`),
			s.metric("cancel_outcome_total", `outcome="NOOP_CANCELED"`))
	})
}
