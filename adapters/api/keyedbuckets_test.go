package api

import (
	"hash/maphash"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestKeyedBucketsNeverShareABudget: 20,000 users (far more than the
// 4,096 hashed slots of the old table) each get exactly their own burst.
func TestKeyedBucketsNeverShareABudget(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	b := newKeyedBuckets[int64](1, 2, DefaultMaxRateKeys, clock.now)
	const users = 20_000
	for u := int64(1); u <= users; u++ {
		for i := range 2 {
			if !b.take(u) {
				t.Fatalf("user %d refused on take %d of a burst of 2: it shares a budget", u, i+1)
			}
		}
	}
	for u := int64(1); u <= users; u++ {
		if b.take(u) {
			t.Fatalf("user %d got a third token from a burst of 2", u)
		}
	}
	clock.advance(time.Second)
	if !b.take(7) || b.take(7) {
		t.Fatal("after one second at 1/s a user must have exactly one token again")
	}
}

// TestKeyedBucketsStayBounded: the table never holds more than its cap;
// buckets refilled to their burst are dropped to make room; while every
// bucket is in use, new keys share a shard's overflow bucket (limited,
// not waved through).
func TestKeyedBucketsStayBounded(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	const maxKeys = bucketShards * 2 // two buckets per shard
	b := newKeyedBuckets[int64](1, 3, maxKeys, clock.now)
	granted := 0
	for u := int64(1); u <= 10_000; u++ {
		if b.take(u) {
			granted++
		}
		if n := b.size(); n > maxKeys {
			t.Fatalf("table holds %d buckets, cap %d", n, maxKeys)
		}
	}
	// Every table slot gave one token and each shard's overflow its burst
	// of 3; the other strangers were refused.
	if want := maxKeys + bucketShards*3; granted != want {
		t.Fatalf("%d of 10000 new keys granted at the cap, want %d", granted, want)
	}
	clock.advance(10 * time.Second) // every bucket refills to its burst
	// New keys, as many per shard as a shard holds (its share of the
	// cap): the refilled buckets must make room for every one of them.
	// Chosen by shard, since the shard of a key depends on the table's
	// random seed (a run of arbitrary keys can crowd one shard).
	perShard := map[uint64]int{}
	for u, taken := int64(20_001), 0; taken < maxKeys && u < 1_000_000; u++ {
		sh := maphash.Comparable(b.seed, u) % bucketShards
		if perShard[sh] == maxKeys/bucketShards {
			continue
		}
		perShard[sh]++
		taken++
		if !b.take(u) {
			t.Fatalf("new key %d refused after the old buckets refilled", u)
		}
	}
	if n := b.size(); n > maxKeys {
		t.Fatalf("table holds %d buckets, cap %d", n, maxKeys)
	}
}
