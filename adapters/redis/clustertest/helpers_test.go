package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ctxT is a test's context, bounded to two minutes.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns a Store on the cluster in a fresh namespace.
func newStore(t *testing.T) (*redis.Store, *goredis.ClusterClient, string) {
	t.Helper()
	c, ns := redistest.NewCluster(t)
	s, err := redis.New(c, redis.Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s, c, ns
}

// open is an activity SKU open from an hour ago to an hour from now.
func open(activityID, skuID, stock int64) ports.Activity {
	now := time.Now()
	return ports.Activity{ActivityID: activityID, SKUID: skuID, Stock: stock,
		StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour),
		ReservationTTL: time.Minute, PaymentTimeout: 15 * time.Minute}
}

// newRsv returns a new PENDING reservation of user in activity SKU a/k,
// created now, with ids derived from tag and user.
func newRsv(t testing.TB, a, k, user int64, tag string) reservation.Snapshot {
	t.Helper()
	id := tag + "_" + strconv.FormatInt(user, 10)
	r, err := reservation.New(reservation.NewReservation{
		ReservationID: "rsv_" + id, OrderID: "ord_" + id, MessageID: "evt_" + id, RequestID: "req_" + id,
		ActivityID: a, SKUID: k, UserID: user, TTL: time.Minute,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return r.Snapshot()
}

// node is one master of the cluster.
type node struct {
	id, host, port string
	c              *goredis.Client
}

// masters returns the cluster's masters by node id.
func masters(t testing.TB, c *goredis.ClusterClient) map[string]*node {
	t.Helper()
	shards, err := c.ClusterShards(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*node{}
	for _, sh := range shards {
		for _, m := range sh.Nodes {
			if m.Role != "master" {
				continue
			}
			port := strconv.FormatInt(m.Port, 10)
			cl := goredis.NewClient(&goredis.Options{Addr: net.JoinHostPort(m.IP, port)})
			t.Cleanup(func() { _ = cl.Close() })
			out[m.ID] = &node{id: m.ID, host: m.IP, port: port, c: cl}
		}
	}
	return out
}

// owner returns the id of the master serving hash slot slot.
func owner(t testing.TB, c *goredis.ClusterClient, slot int64) string {
	t.Helper()
	shards, err := c.ClusterShards(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, m := range sh.Nodes {
					if m.Role == "master" {
						return m.ID
					}
				}
			}
		}
	}
	t.Fatalf("hash slot %d is served by no master", slot)
	return ""
}

// keySlot returns the hash slot of key.
func keySlot(t testing.TB, c *goredis.ClusterClient, key string) int64 {
	t.Helper()
	n, err := c.ClusterKeySlot(ctxT(t), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// skuKey is a key of activity SKU a/k in namespace ns (they all share one
// hash slot).
func skuKey(ns string, a, k int64) string {
	return fmt.Sprintf("%s:{a%d:s%d}:stock", ns, a, k)
}
