package bootstrap_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// laned creates an activity whose stock is split over lanes Redis lanes.
func (s *system) laned(id, stock int64, lanes int32) {
	s.t.Helper()
	now := time.Now()
	if _, err := s.admin.CreateActivity(context.Background(), authed(&seckillv1.CreateActivityRequest{
		ActivityId: id, SkuId: 1, Stock: stock, StockLanes: lanes,
		StartsAt: tsOf(now.Add(-time.Minute)), EndsAt: tsOf(now.Add(time.Hour)),
		PaymentTimeout: durOf(time.Minute), ReservationTtl: durOf(10 * time.Minute),
	}, s.token(1, true))); err != nil {
		s.t.Fatal(err)
	}
}

func (s *system) addStock(act, qty int64, requestID string) (*seckillv1.AddStockResponse, error) {
	res, err := s.admin.AddStock(context.Background(), authed(&seckillv1.AddStockRequest{ActivityId: act, SkuId: 1,
		Quantity: qty, RequestId: requestID}, s.token(1, true)))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// buyers has n new buyers (users from first on) place at once on act and
// returns how many were accepted; every other answer must be SOLD_OUT.
func (s *system) buyers(act, first int64, n int, tag string) int64 {
	s.t.Helper()
	var accepted atomic.Int64
	concurrently(n, 16, func(i int) {
		_, err := s.place(context.Background(), first+int64(i), act, fmt.Sprintf("%s-%d", tag, i))
		switch {
		case err == nil:
			accepted.Add(1)
		case connect.CodeOf(err) != connect.CodeResourceExhausted && connect.CodeOf(err) != connect.CodeFailedPrecondition:
			s.t.Errorf("place %d: %v", i, err)
		}
	})
	return accepted.Load()
}

// restockUnderLoad runs the restock scenario on activity act: a sold-out
// sale, a restock while buyers keep coming, its retry, a restock whose
// process "dies" between its Redis and its PostgreSQL step (the
// failpoint) and is finished by recovery, a removal beyond the unreserved
// units refused, a removal that fits; after each step exactly the units
// added are sold once more, and I1-I7 hold with the changed stock.
func restockUnderLoad(t *testing.T, s *system, act int64) {
	if got := s.buyers(act, 1000, 20, "first"); got != 10 {
		t.Fatalf("the first wave got %d units, want the 10 of the stock", got)
	}
	// The restock while buyers keep coming: every unit of it is sold, and
	// only those.
	var res *seckillv1.AddStockResponse
	var err error
	done := make(chan struct{})
	var during int64
	go func() { defer close(done); during = s.buyers(act, 2000, 20, "during") }()
	res, err = s.addStock(act, 5, "delivery-1")
	<-done
	if err != nil || !res.GetApplied() || res.GetStock() != 15 {
		t.Fatalf("AddStock: %v, %v; want applied with stock 15", res, err)
	}
	after := s.buyers(act, 3000, 20, "after")
	if during+after != 5 {
		t.Fatalf("after the restock %d + %d units sold, want exactly the 5 added", during, after)
	}
	// The retry adds nothing.
	if res, err = s.addStock(act, 5, "delivery-1"); err != nil || res.GetApplied() || res.GetStock() != 15 {
		t.Fatalf("retried AddStock: %v, %v; want not applied, stock 15", res, err)
	}
	if got := s.buyers(act, 4000, 10, "retry"); got != 0 {
		t.Fatalf("after the retried restock %d units sold, want 0", got)
	}
	// The process "dies" between Redis and PostgreSQL: the call fails; its
	// retry, or the recovery worker, finishes it once.
	if err := s.app.Failpoints.Set(ports.FailStockChangeAfterRedis, "error"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.addStock(act, 3, "delivery-2"); err == nil {
		t.Fatal("AddStock through the failpoint succeeded")
	}
	s.app.Failpoints.Clear(ports.FailStockChangeAfterRedis)
	s.eventually(60*time.Second, "the interrupted restock is finished", func() bool {
		return s.count(`SELECT count(*) FROM stock_changes WHERE request_id = 'delivery-2' AND status = 'APPLIED'`) == 1
	})
	if res, err = s.addStock(act, 3, "delivery-2"); err != nil || res.GetApplied() || res.GetStock() != 18 {
		t.Fatalf("AddStock after the recovery: %v, %v; want not applied, stock 18", res, err)
	}
	if got := s.buyers(act, 5000, 10, "recovered"); got != 3 {
		t.Fatalf("after the interrupted restock %d units sold, want exactly its 3", got)
	}
	// Sold out again: removal beyond the unreserved units is refused, and
	// changes nothing.
	_, err = s.admin.RemoveStock(context.Background(), authed(&seckillv1.RemoveStockRequest{ActivityId: act, SkuId: 1,
		Quantity: 1, RequestId: "recount-1"}, s.token(1, true)))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("RemoveStock of a sold-out sale: %v, want InvalidArgument on quantity", err)
	}
	if res, err = s.addStock(act, 4, "delivery-3"); err != nil || res.GetStock() != 22 {
		t.Fatalf("AddStock: %v, %v", res, err)
	}
	rm, err := s.admin.RemoveStock(context.Background(), authed(&seckillv1.RemoveStockRequest{ActivityId: act, SkuId: 1,
		Quantity: 3, RequestId: "recount-2"}, s.token(1, true)))
	if err != nil || !rm.Msg.GetApplied() || rm.Msg.GetStock() != 19 {
		t.Fatalf("RemoveStock of 3 of 4 free units: %v, %v; want applied, stock 19", rm, err)
	}
	if got := s.buyers(act, 6000, 10, "last"); got != 1 {
		t.Fatalf("after removing 3 of 4 added units %d sold, want 1", got)
	}
	if n := s.count(`SELECT stock FROM activities WHERE activity_id = $1`, act); n != 19 {
		t.Fatalf("activities.stock %d, want 19", n)
	}
	s.invariants(act)
	if n := s.count(`SELECT count(*) FROM admin_audit WHERE action IN ('ADD_STOCK', 'REMOVE_STOCK')`); n < 5 {
		t.Fatalf("%d stock changes audited, want every call", n)
	}
}

// TestRestockUnderLoad (both brokers): restockUnderLoad on a one-lane
// SKU.
func TestRestockUnderLoad(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker, configure: func(c *config.Config) {
			c.Failpoints = ports.FailStockChangeAfterRedis + "=delay(0s)" // a registry the test sets at run time
		}})
		s.activity(81, 10, time.Minute, 10*time.Minute)
		restockUnderLoad(t, s, 81)
	})
}

// TestRestockUnderLoadOnThreeLanes: the same on the Redis Cluster with the
// SKU's stock in three lanes (each lane gets its share of a restock).
func TestRestockUnderLoadOnThreeLanes(t *testing.T) {
	s := startSystem(t, options{redisCluster: true, configure: func(c *config.Config) {
		c.Failpoints = ports.FailStockChangeAfterRedis + "=delay(0s)"
	}})
	s.laned(82, 10, 3)
	restockUnderLoad(t, s, 82)
}
