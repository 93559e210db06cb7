// Package redistest gives tests a Redis client on the local stack
// (SECKILL_REDIS_ADDR) bound to a logical database that the test process
// leases for itself (see package redisdb), and a key namespace of their own
// inside it. Test packages therefore run in parallel against one Redis, and
// neither the keys a running service keeps in database 0 nor the data of an
// earlier run slow them down or are touched by them.
//
// ClusterClient gives tests a client of the Redis Cluster at
// SECKILL_REDIS_CLUSTER_ADDRS (deploy/local/stack.sh up starts one); a
// cluster has database 0 only, so tests there are isolated by their
// namespace alone.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/redisdb"
)

// EnvAddr names the environment variable holding the Redis address.
const EnvAddr = "SECKILL_REDIS_ADDR"

// EnvClusterAddrs names the environment variable holding the seed
// addresses of the test Redis Cluster, comma-separated.
const EnvClusterAddrs = "SECKILL_REDIS_CLUSTER_ADDRS"

// processDB is the logical database this test process leases on first
// use. The lease is the process's: it is renewed while the process lives
// and lapses after redisdb.DefaultTTL once it ends, and the next claimant
// empties the database.
var processDB struct {
	once sync.Once
	db   int
	err  error
}

// DB returns the logical database this test process leased, leasing it on
// the first call. It fails the test when SECKILL_REDIS_ADDR is unset or
// Redis does not answer.
func DB(tb testing.TB) int {
	tb.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		tb.Fatalf("%s is not set: run `make test` or eval \"$(deploy/local/stack.sh env)\"", EnvAddr)
	}
	processDB.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		l, err := redisdb.Claim(ctx, goredis.Options{Addr: addr}, redisdb.DefaultTTL)
		if err != nil {
			processDB.err = err
			return
		}
		processDB.db = l.DB
	})
	if processDB.err != nil {
		tb.Fatalf("redis at %s (%s): %v; run `make test` or eval \"$(deploy/local/stack.sh env)\"", addr, EnvAddr, processDB.err)
	}
	return processDB.db
}

// Client returns a client for the Redis at SECKILL_REDIS_ADDR bound to
// this process's leased database (see DB), closed when the test ends.
func Client(tb testing.TB) *goredis.Client {
	tb.Helper()
	db := DB(tb)
	c := goredis.NewClient(&goredis.Options{Addr: os.Getenv(EnvAddr), DB: db, PoolSize: 64})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ClusterClient returns a client of the Redis Cluster whose seed nodes are
// SECKILL_REDIS_CLUSTER_ADDRS, closed when the test ends. It fails the test
// when the variable is unset or when the cluster does not answer PING on
// every master within 10 seconds.
func ClusterClient(tb testing.TB) *goredis.ClusterClient {
	tb.Helper()
	var addrs []string
	for a := range strings.SplitSeq(os.Getenv(EnvClusterAddrs), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		tb.Fatalf("%s is not set: run `make test` or eval \"$(deploy/local/stack.sh up)\"", EnvClusterAddrs)
	}
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, PoolSize: 32})
	tb.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		tb.Fatalf("redis cluster at %s (%s): %v; is the stack up? eval \"$(deploy/local/stack.sh up)\"",
			strings.Join(addrs, ","), EnvClusterAddrs, err)
	}
	return c
}

// NewCluster returns a cluster client (see ClusterClient) and a fresh
// namespace on it (see Namespace).
func NewCluster(tb testing.TB) (*goredis.ClusterClient, string) {
	tb.Helper()
	c := ClusterClient(tb)
	return c, Namespace(tb, c)
}

// Namespace returns a key namespace unique to this test ("t-<test>-<random>")
// and deletes every key under it when the test ends.
func Namespace(tb testing.TB, c goredis.UniversalClient) string {
	tb.Helper()
	name := sanitize(tb.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	ns := "t-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b)
	tb.Cleanup(func() { Purge(tb, c, ns) })
	return ns
}

// sanitize lowers s and replaces each run of characters other than a-z
// and 0-9 with one dash.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return b.String()
}

// New returns a client (see Client) and a fresh namespace on it (see
// Namespace).
func New(tb testing.TB) (*goredis.Client, string) {
	tb.Helper()
	c := Client(tb)
	return c, Namespace(tb, c)
}

// Purge deletes every key of namespace ns (SCAN + UNLINK). The scan walks
// only c's database, which is the process's leased one when c comes from
// Client; on a cluster client it walks every master.
func Purge(tb testing.TB, c goredis.UniversalClient, ns string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cc, ok := c.(*goredis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
			purge(ctx, tb, m, ns)
			return nil
		})
		return
	}
	purge(ctx, tb, c, ns)
}

// purge deletes the keys of ns that one node's SCAN finds.
func purge(ctx context.Context, tb testing.TB, c goredis.Cmdable, ns string) {
	tb.Helper()
	var batch []string
	flush := func() bool {
		if len(batch) == 0 {
			return true
		}
		_, err := c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range batch {
				p.Unlink(ctx, k)
			}
			return nil
		})
		batch = batch[:0]
		if err != nil {
			tb.Errorf("redistest: purge %s: %v", ns, err)
			return false
		}
		return true
	}
	iter := c.Scan(ctx, 0, ns+":*", 1000).Iterator()
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) >= 1000 && !flush() {
			return
		}
	}
	if err := iter.Err(); err != nil {
		tb.Errorf("redistest: purge %s: %v", ns, err)
		return
	}
	flush()
}
