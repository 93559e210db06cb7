package bootstrap_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// restockPaymentTimeout outlasts any restock test: an order that timed out
// unpaid would give its unit back, and the tests count exactly the units
// each restock added (a loaded machine once took over a minute to reach
// the interrupted restock, and two first-wave orders had expired).
const restockPaymentTimeout = 30 * time.Minute

// laned creates an activity whose stock is split over lanes Redis lanes.
func (s *system) laned(id, stock int64, lanes int32) {
	s.t.Helper()
	now := time.Now()
	if _, err := s.admin.CreateActivity(context.Background(), authed(&seckillv1.CreateActivityRequest{
		ActivityId: id, SkuId: 1, Stock: stock, StockLanes: lanes,
		StartsAt: tsOf(now.Add(-time.Minute)), EndsAt: tsOf(now.Add(time.Hour)),
		PaymentTimeout: durOf(restockPaymentTimeout), ReservationTtl: durOf(10 * time.Minute),
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
	if _, single := s.redis.(*goredis.Client); !single {
		return
	}
	// Redis restarts empty after a restock: the books rebuilt from
	// PostgreSQL hold every applied change, so exactly the 2 units added
	// last are sold, not 0 and not 4.
	if res, err = s.addStock(act, 2, "delivery-4"); err != nil || res.GetStock() != 21 {
		t.Fatalf("AddStock before the restart: %v, %v", res, err)
	}
	s.redisRestarted()
	s.eventually(90*time.Second, "the books are rebuilt from PostgreSQL with every change", func() bool {
		rep, err := s.admin.GetStockReport(context.Background(), authed(&seckillv1.GetStockReportRequest{ActivityId: act, SkuId: 1},
			s.token(1, true)))
		return err == nil && rep.Msg.GetReport().GetInitialStock() == 21 && rep.Msg.GetReport().GetRedisAvailable() == 2 &&
			rep.Msg.GetReport().GetDrift() == 0
	})
	var got int64
	s.eventually(60*time.Second, "the rebuilt units sell", func() bool {
		got += s.buyers(act, 7000+got*100, 10, fmt.Sprintf("rebuilt-%d", got))
		return got >= 2
	})
	if more := s.buyers(act, 9000, 10, "rebuilt-more"); got != 2 || more != 0 {
		t.Fatalf("after the rebuild %d + %d units sold, want exactly 2", got, more)
	}
	s.invariants(act)
}

// redisRestarted plays a Redis that restarted empty: every key of the
// system's namespace is deleted and the connections to the test process's
// logical database are killed, so they reconnect to what the generation guard sees as another
// process, which freezes the books until the stock recovery rebuilds them
// from PostgreSQL.
func (s *system) redisRestarted() {
	s.t.Helper()
	ctx := context.Background()
	c := s.redis.(*goredis.Client)
	redistest.Purge(s.t, c, s.ns) // this system's keys only: the database is the test process's
	if n, err := c.Keys(ctx, s.ns+"*").Result(); err != nil || len(n) != 0 {
		s.t.Fatalf("after the purge %d keys of %s are left (%v)", len(n), s.ns, err)
	}
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	db := "db=" + strconv.Itoa(c.Options().DB)
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		fields := strings.Fields(line)
		if !slices.Contains(fields, db) {
			continue
		}
		for _, f := range fields {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				if err := c.ClientKillByFilter(ctx, "ID", id).Err(); err == nil {
					killed++
				}
			}
		}
	}
	if killed == 0 {
		s.t.Fatalf("no connection of the service on %s to kill:\n%s", db, list)
	}
}

// TestRestockUnderLoad (both brokers): restockUnderLoad on a one-lane
// SKU.
func TestRestockUnderLoad(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker, configure: func(c *config.Config) {
			c.Failpoints = ports.FailStockChangeAfterRedis + "=delay(0s)" // a registry the test sets at run time
		}})
		s.activity(81, 10, restockPaymentTimeout, 10*time.Minute)
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
