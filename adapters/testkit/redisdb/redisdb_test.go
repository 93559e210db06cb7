package redisdb

import (
	"context"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

func opts(t *testing.T) goredis.Options {
	t.Helper()
	addr := os.Getenv("SECKILL_REDIS_ADDR")
	if addr == "" {
		t.Fatal("SECKILL_REDIS_ADDR is not set: run `make test`")
	}
	return goredis.Options{Addr: addr}
}

// TestClaimIsExclusiveEmptyAndReleased takes two leases at once, checks
// that they are distinct databases other than 0, each empty at the start,
// and that Release empties the database and frees it for the next claim.
func TestClaimIsExclusiveEmptyAndReleased(t *testing.T) {
	ctx := t.Context()
	a, err := Claim(ctx, opts(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Claim(ctx, opts(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Release(context.Background()) }()
	if a.DB == 0 || b.DB == 0 || a.DB == b.DB {
		t.Fatalf("leased databases %d and %d: want two distinct ones other than 0", a.DB, b.DB)
	}
	for _, l := range []*Lease{a, b} {
		if n := l.Client.DBSize(ctx).Val(); n != 1 {
			t.Fatalf("database %d holds %d keys after the claim, want only the lease", l.DB, n)
		}
	}
	if err := a.Client.Set(ctx, "left-behind", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	db := a.DB
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	probe := opts(t)
	probe.DB = db
	pc := goredis.NewClient(&probe)
	defer func() { _ = pc.Close() }()
	// FLUSHDB ASYNC frees the memory in the background; the keyspace is
	// empty as soon as the command returns.
	if n := pc.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("database %d holds %d keys after Release", db, n)
	}
}

// TestLeaseIsRenewed claims with a short TTL and checks the lease key is
// still there after several TTLs have passed.
func TestLeaseIsRenewed(t *testing.T) {
	ctx := t.Context()
	l, err := Claim(ctx, opts(t), 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(context.Background()) }()
	time.Sleep(2 * time.Second)
	if v := l.Client.Get(ctx, LeaseKey).Val(); v != l.token {
		t.Fatalf("lease key = %q after 3 TTLs, want the holder's token", v)
	}
}
