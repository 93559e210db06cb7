package redis

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

func claimFor(user int64, req string, activity, sku int64, n int) ports.RequestClaim {
	return ports.RequestClaim{
		UserID: user, RequestID: req, ActivityID: activity, SKUID: sku,
		ReservationID: fmt.Sprintf("rsv_%s_%d", req, n), OrderID: fmt.Sprintf("ord_%s_%d", req, n),
		MessageID: fmt.Sprintf("evt_%s_%d", req, n),
	}
}

func TestClaimRequestBindsOnceAndLooksUpOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	first := claimFor(7, "req-a", 1, 2, 1)
	got, existing, err := f.s.ClaimRequest(ctx, first, time.Minute)
	if err != nil || existing || got != first {
		t.Fatalf("first claim = %+v, %v, %v; want %+v, false, nil", got, existing, err, first)
	}
	// A retry of the same request with freshly generated ids gets the
	// ids bound first.
	got, existing, err = f.s.ClaimRequest(ctx, claimFor(7, "req-a", 1, 2, 2), time.Minute)
	if err != nil || !existing || got != first {
		t.Fatalf("repeated claim = %+v, %v, %v; want %+v, true, nil", got, existing, err, first)
	}
	if ttl := f.c.PTTL(ctx, f.s.keys.request(7, "req-a")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("request claim ttl = %v, want (0, 1m]", ttl)
	}
	if ttl := f.c.PTTL(ctx, f.s.keys.orderLookup(7, first.OrderID)).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("order lookup ttl = %v, want (0, 1m]", ttl)
	}

	r, err := f.s.LookupOrder(ctx, 7, first.OrderID)
	want := ports.ReservationRef{ActivityID: 1, SKUID: 2, ReservationID: first.ReservationID, UserID: 7}
	if err != nil || r != want {
		t.Fatalf("LookupOrder = %+v, %v; want %+v", r, err, want)
	}
	_, err = f.s.LookupOrder(ctx, 8, first.OrderID)
	wantErr(t, err, ports.ErrNotFound)
	_, err = f.s.LookupOrder(ctx, 7, "ord_unknown")
	wantErr(t, err, ports.ErrNotFound)
	// The second claim's order id was never bound.
	_, err = f.s.LookupOrder(ctx, 7, claimFor(7, "req-a", 1, 2, 2).OrderID)
	wantErr(t, err, ports.ErrNotFound)
}

func TestClaimRequestDefaultTTL(t *testing.T) {
	t.Parallel()
	f := newFixture(t, with(func(c *Config) { c.RequestClaimTTL = 90 * time.Second }))
	ctx := ctxT(t)
	if _, _, err := f.s.ClaimRequest(ctx, claimFor(1, "r", 1, 1, 1), 0); err != nil {
		t.Fatal(err)
	}
	if ttl := f.c.PTTL(ctx, f.s.keys.request(1, "r")).Val(); ttl <= time.Minute || ttl > 90*time.Second {
		t.Fatalf("ttl = %v, want (60s, 90s]", ttl)
	}
}

func TestClaimRequestReusedForOtherActivityOrSKU(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	if _, _, err := f.s.ClaimRequest(ctx, claimFor(3, "req", 10, 20, 1), time.Minute); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.s.ClaimRequest(ctx, claimFor(3, "req", 10, 21, 2), time.Minute)
	wantErr(t, err, ports.ErrRequestIDReused)
	_, _, err = f.s.ClaimRequest(ctx, claimFor(3, "req", 11, 20, 3), time.Minute)
	wantErr(t, err, ports.ErrRequestIDReused)
	// The same request id of another user is another request.
	if _, existing, err := f.s.ClaimRequest(ctx, claimFor(4, "req", 11, 20, 4), time.Minute); err != nil || existing {
		t.Fatalf("other user's claim: existing=%v err=%v", existing, err)
	}
}

func TestClaimRequestRateLimitExhaustionAndRefill(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withClock, with(func(c *Config) { c.RateLimit = RateLimit{Capacity: 3, RefillPerSecond: 1} }))
	ctx := ctxT(t)
	n := 0
	claim := func() error {
		n++
		_, _, err := f.s.ClaimRequest(ctx, claimFor(5, fmt.Sprintf("req-%d", n), 1, 1, n), time.Minute)
		return err
	}
	for i := range 3 {
		if err := claim(); err != nil {
			t.Fatalf("claim %d within capacity: %v", i, err)
		}
	}
	wantErr(t, claim(), ports.ErrRateLimited)
	// A repeated request takes no token, even with an empty bucket.
	if _, existing, err := f.s.ClaimRequest(ctx, claimFor(5, "req-1", 1, 1, 99), time.Minute); err != nil || !existing {
		t.Fatalf("repeated request with empty bucket: existing=%v err=%v", existing, err)
	}
	// Other users have their own bucket.
	if _, _, err := f.s.ClaimRequest(ctx, claimFor(6, "x", 1, 1, 1), time.Minute); err != nil {
		t.Fatalf("other user: %v", err)
	}
	f.advance(500 * time.Millisecond)
	wantErr(t, claim(), ports.ErrRateLimited)
	f.advance(500 * time.Millisecond) // one token refilled
	if err := claim(); err != nil {
		t.Fatalf("after refill: %v", err)
	}
	wantErr(t, claim(), ports.ErrRateLimited)
	f.advance(time.Hour) // refills to capacity, not beyond
	for i := range 3 {
		if err := claim(); err != nil {
			t.Fatalf("claim %d after full refill: %v", i, err)
		}
	}
	wantErr(t, claim(), ports.ErrRateLimited)
}

func TestClaimRequestRateLimitWithRedisClock(t *testing.T) {
	t.Parallel()
	// Without Config.Clock the bucket uses Redis' TIME; a refill this slow
	// adds no token during the test.
	f := newFixture(t, with(func(c *Config) { c.RateLimit = RateLimit{Capacity: 2, RefillPerSecond: 0.0001} }))
	ctx := ctxT(t)
	for i := range 2 {
		if _, _, err := f.s.ClaimRequest(ctx, claimFor(9, fmt.Sprintf("r%d", i), 1, 1, i), time.Minute); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	_, _, err := f.s.ClaimRequest(ctx, claimFor(9, "r2", 1, 1, 2), time.Minute)
	wantErr(t, err, ports.ErrRateLimited)
	if ttl := f.c.PTTL(ctx, f.s.keys.bucket(9)).Val(); ttl <= 0 {
		t.Fatalf("bucket ttl = %v, want > 0", ttl)
	}
}

func TestClaimRequestRateLimitDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, with(func(c *Config) { c.RateLimit.Capacity = -1 }))
	ctx := ctxT(t)
	for i := range 50 {
		if _, _, err := f.s.ClaimRequest(ctx, claimFor(9, fmt.Sprintf("r%d", i), 1, 1, i), time.Minute); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	if n := f.c.Exists(ctx, f.s.keys.bucket(9)).Val(); n != 0 {
		t.Fatalf("bucket exists with rate limiting disabled")
	}
}

func TestClaimRequestConcurrentSameRequestID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	const n = 50
	var (
		wg      sync.WaitGroup
		results [n]ports.RequestClaim
		exists  [n]bool
		errs    [n]error
	)
	for i := range n {
		wg.Go(func() {
			results[i], exists[i], errs[i] = f.s.ClaimRequest(ctx, claimFor(11, "same", 1, 1, i), time.Minute)
		})
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if results[i] != results[0] {
			t.Fatalf("call %d bound %+v, call 0 %+v", i, results[i], results[0])
		}
		if !exists[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d calls created the claim, want 1", fresh)
	}
}

func TestClaimRequestValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := claimFor(1, "r", 1, 1, 1)
	c.OrderID = ""
	if _, _, err := f.s.ClaimRequest(ctxT(t), c, time.Minute); err == nil {
		t.Fatal("claim without order id accepted")
	}
}
