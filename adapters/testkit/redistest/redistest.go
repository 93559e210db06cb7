// Package redistest gives tests a Redis client on the local stack
// (SECKILL_REDIS_ADDR) and a key namespace of their own, so that tests and
// packages can run in parallel against one Redis and a reused Redis with old
// data does not matter.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// EnvAddr names the environment variable holding the Redis address.
const EnvAddr = "SECKILL_REDIS_ADDR"

// Client returns a client for the Redis at SECKILL_REDIS_ADDR, closed when
// the test ends. It fails the test when the variable is unset or Redis does
// not answer PING.
func Client(tb testing.TB) *goredis.Client {
	tb.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		tb.Fatalf("%s is not set: run `make test` or eval \"$(deploy/local/stack.sh env)\"", EnvAddr)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64})
	tb.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s (%s) does not answer: %v; run `make test` or eval \"$(deploy/local/stack.sh env)\"", addr, EnvAddr, err)
	}
	return c
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

// Purge deletes every key of namespace ns (SCAN + UNLINK; for tests only).
func Purge(tb testing.TB, c goredis.UniversalClient, ns string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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
