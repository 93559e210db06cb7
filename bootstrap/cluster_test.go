package bootstrap_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestSaleOnRedisCluster: the whole service on Redis Cluster (several
// seed addresses in SECKILL_REDIS_ADDR) sells three activities, whose
// SKUs hash to slots of different masters, to exactly their stock and
// keeps every invariant; the scanner, the backlog gate and the
// reconciliation read across the shards.
func TestSaleOnRedisCluster(t *testing.T) {
	s := startSystem(t, options{redisCluster: true})
	if !s.cfg.RedisCluster() {
		t.Fatalf("SECKILL_REDIS_ADDR %q does not select the cluster", s.cfg.Redis.Addr)
	}
	const stock, buyers = 60, 100
	activities := []int64{1, 5, 3} // {a1:s1}, {a5:s1} and {a3:s1} hash to three masters of a 3-master cluster
	cc, ok := s.redis.(*goredis.ClusterClient)
	if !ok {
		t.Fatalf("the system's Redis client is %T, not a cluster client", s.redis)
	}
	masters := map[string]bool{}
	for _, a := range activities {
		node, err := cc.MasterForKey(context.Background(), fmt.Sprintf("{a%d:s1}", a))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(masters) != len(activities) {
		t.Fatalf("the activities' slots are on %d masters, want %d", len(masters), len(activities))
	}
	for _, a := range activities {
		s.activity(a, stock, 15*time.Minute, 5*time.Minute)
	}
	var won [6]atomic.Int64
	concurrently(len(activities)*buyers, 16, func(i int) {
		a := activities[i%len(activities)]
		user := int64(30_000 + i)
		if _, err := s.place(context.Background(), user, a, fmt.Sprintf("c-%d", user)); err == nil {
			won[a].Add(1)
		}
	})
	for _, a := range activities {
		if won[a].Load() != stock {
			t.Errorf("activity %d: %d reservations, want %d", a, won[a].Load(), stock)
		}
		s.invariants(a)
		if n := s.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, a); n != stock {
			t.Errorf("activity %d: %d orders, want %d", a, n, stock)
		}
	}
}
