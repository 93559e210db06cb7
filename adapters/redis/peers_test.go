package redis

import (
	"context"
	"testing"
	"time"
)

// TestConsumerPeersCountTheLiveInstances: each heartbeat counts the
// instances seen within its ttl, the caller included; an instance whose
// last heartbeat is older than the ttl is forgotten, one that leaves is
// gone at once, and a repeated heartbeat does not count twice.
func TestConsumerPeersCountTheLiveInstances(t *testing.T) {
	f := newFixture(t, withClock)
	ctx := context.Background()
	const ttl = 3 * time.Second
	beat := func(instance string, want int) {
		t.Helper()
		n, err := f.s.Heartbeat(ctx, instance, ttl)
		if err != nil {
			t.Fatalf("heartbeat %s: %v", instance, err)
		}
		if n != want {
			t.Fatalf("heartbeat %s: %d live instances, want %d", instance, n, want)
		}
	}
	beat("a", 1)
	beat("a", 1)
	beat("b", 2)
	f.advance(2 * time.Second)
	beat("c", 3)
	// a and b were last seen 2 s ago: still live at 3 s, gone after.
	f.advance(1500 * time.Millisecond)
	beat("c", 1)
	beat("b", 2)
	if err := f.s.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	beat("c", 1)
	if ttlLeft := f.c.PTTL(ctx, f.s.keys.consumerInstances()).Val(); ttlLeft <= 0 || ttlLeft > 2*ttl {
		t.Fatalf("the instances set expires in %v, want within 2 x ttl", ttlLeft)
	}
}

// TestConsumerPeersRejectBadInput: no instance or no ttl is an error,
// not a member.
func TestConsumerPeersRejectBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.s.Heartbeat(ctx, "", time.Second); err == nil {
		t.Fatal("a heartbeat without an instance was accepted")
	}
	if _, err := f.s.Heartbeat(ctx, "a", 0); err == nil {
		t.Fatal("a heartbeat without a ttl was accepted")
	}
	if n := f.c.ZCard(ctx, f.s.keys.consumerInstances()).Val(); n != 0 {
		t.Fatalf("%d members after rejected heartbeats", n)
	}
}

// TestConsumerPeersOnTheServerClock: without Config.Clock the script
// scores by Redis' TIME.
func TestConsumerPeersOnTheServerClock(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i, want := range []int{1, 2} {
		n, err := f.s.Heartbeat(ctx, string(rune('a'+i)), time.Minute)
		if err != nil || n != want {
			t.Fatalf("heartbeat %d: %d, %v; want %d", i, n, err, want)
		}
	}
	score := f.c.ZScore(ctx, f.s.keys.consumerInstances(), "a").Val()
	if d := time.Since(time.UnixMilli(int64(score))); d < -time.Minute || d > time.Minute {
		t.Fatalf("heartbeat scored %v away from now", d)
	}
}
