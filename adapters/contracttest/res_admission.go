package contracttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// requestClaim returns a claim with fresh ids.
func requestClaim(userID int64, requestID string, activityID, skuID int64) ports.RequestClaim {
	id := uniq()
	return ports.RequestClaim{
		UserID: userID, RequestID: requestID, ActivityID: activityID, SKUID: skuID,
		ReservationID: "rsv_" + id, OrderID: "ord_" + id, MessageID: "evt_" + id,
	}
}

func sameIDs(a, b ports.RequestClaim) bool {
	return a.ReservationID == b.ReservationID && a.OrderID == b.OrderID && a.MessageID == b.MessageID
}

func testClaimRequest(t *testing.T, adm ports.Admission) {
	ctx := t.Context()
	a, s := randomID(), randomID()
	c := requestClaim(1, "req-"+uniq(), a, s)
	bound, existing, err := adm.ClaimRequest(ctx, c, time.Hour)
	noErr(t, "fresh ClaimRequest", err)
	if existing || !sameIDs(bound, c) {
		t.Fatalf("fresh ClaimRequest = %+v, existing %v; want the claim itself, false", bound, existing)
	}
	retry := requestClaim(1, c.RequestID, a, s)
	bound, existing, err = adm.ClaimRequest(ctx, retry, time.Hour)
	noErr(t, "repeated ClaimRequest", err)
	if !existing || !sameIDs(bound, c) {
		t.Fatalf("repeated ClaimRequest = %+v, existing %v; want the first ids %+v, true", bound, existing, c)
	}
	_, _, err = adm.ClaimRequest(ctx, requestClaim(1, c.RequestID, a, s+1), time.Hour)
	wantErr(t, "request_id reused for another SKU", err, ports.ErrRequestIDReused)
	_, _, err = adm.ClaimRequest(ctx, requestClaim(1, c.RequestID, a+1, s), time.Hour)
	wantErr(t, "request_id reused for another activity", err, ports.ErrRequestIDReused)
	otherUser := requestClaim(2, c.RequestID, a, s+1)
	bound, existing, err = adm.ClaimRequest(ctx, otherUser, time.Hour)
	noErr(t, "same request_id of another user", err)
	if existing || !sameIDs(bound, otherUser) {
		t.Fatalf("same request_id of another user = %+v, existing %v; want a fresh claim", bound, existing)
	}

	ref, err := adm.LookupOrder(ctx, 1, c.OrderID)
	noErr(t, "LookupOrder", err)
	if want := (ports.ReservationRef{ActivityID: a, SKUID: s, ReservationID: c.ReservationID, UserID: 1}); ref != want {
		t.Fatalf("LookupOrder = %+v, want %+v", ref, want)
	}
	_, err = adm.LookupOrder(ctx, 2, c.OrderID)
	wantErr(t, "LookupOrder of another user's order", err, ports.ErrNotFound)
	_, err = adm.LookupOrder(ctx, 1, retry.OrderID)
	wantErr(t, "LookupOrder of ids never bound", err, ports.ErrNotFound)

	for _, tc := range []struct {
		user    int64
		request string
		want    bool
	}{{1, c.RequestID, true}, {2, c.RequestID, true}, {3, c.RequestID, false}, {1, "req-never-" + uniq(), false}} {
		got, err := adm.BuyerState(ctx, tc.user, tc.request, a, s)
		noErr(t, "BuyerState", err)
		if got.RequestBound != tc.want || got.HoldsUnit {
			t.Fatalf("BuyerState(user %d, %q) = %+v, want bound %v, no unit", tc.user, tc.request, got, tc.want)
		}
	}
}

func testRateLimit(t *testing.T, adm ports.Admission, clock *suiteClock) {
	ctx := t.Context()
	a, s := randomID(), randomID()
	const user = 5
	var claims []ports.RequestClaim
	for i := range suiteRateCapacity {
		c := requestClaim(user, fmt.Sprintf("req-%d-%s", i, uniq()), a, s)
		_, _, err := adm.ClaimRequest(ctx, c, time.Hour)
		noErr(t, fmt.Sprintf("fresh claim %d within the bucket", i), err)
		claims = append(claims, c)
	}
	limited := requestClaim(user, "req-limited-"+uniq(), a, s)
	_, _, err := adm.ClaimRequest(ctx, limited, time.Hour)
	wantErr(t, "fresh claim beyond the bucket", err, ports.ErrRateLimited)

	retry := claims[0]
	retry.ReservationID, retry.OrderID, retry.MessageID = "rsv_x"+uniq(), "ord_x"+uniq(), "evt_x"+uniq()
	bound, existing, err := adm.ClaimRequest(ctx, retry, time.Hour)
	noErr(t, "repeated claim with an empty bucket (takes no token)", err)
	if !existing || !sameIDs(bound, claims[0]) {
		t.Fatalf("repeated claim = %+v, existing %v; want the first ids, true", bound, existing)
	}
	_, _, err = adm.ClaimRequest(ctx, requestClaim(user+1, "req-"+uniq(), a, s), time.Hour)
	noErr(t, "another user's bucket is independent", err)

	clock.Advance(time.Duration(float64(time.Second) / suiteRefillPerSecond))
	bound, existing, err = adm.ClaimRequest(ctx, limited, time.Hour)
	noErr(t, "the limited request after one token refilled", err)
	if existing || !sameIDs(bound, limited) {
		t.Fatalf("limited request retried after refill = %+v, existing %v; want a fresh claim (a limited request binds nothing)", bound, existing)
	}
	_, _, err = adm.ClaimRequest(ctx, requestClaim(user, "req-"+uniq(), a, s), time.Hour)
	wantErr(t, "fresh claim after the refilled token was used", err, ports.ErrRateLimited)
}

func testClaimRequestConcurrent(t *testing.T, adm ports.Admission) {
	a, s := randomID(), randomID()
	req := "req-" + uniq()
	const n = 8
	bound := make([]ports.RequestClaim, n)
	existing := make([]bool, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		bound[i], existing[i], errs[i] = adm.ClaimRequest(t.Context(), requestClaim(9, req, a, s), time.Hour)
	})
	fresh := 0
	for i := range n {
		noErr(t, "concurrent ClaimRequest", errs[i])
		if !sameIDs(bound[i], bound[0]) {
			t.Fatalf("concurrent claims of one request_id bound %+v and %+v; want the same ids", bound[0], bound[i])
		}
		if !existing[i] {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d concurrent claims of one request_id: %d fresh, want 1", n, fresh)
	}
}

// testForgetRequest: forgetting a claim bound to another reservation
// changes nothing; forgetting the bound one lets the claim and its order
// lookup expire within the given ttl, after which the same request_id
// binds fresh ids.
func testForgetRequest(t *testing.T, adm ports.Admission, clock *suiteClock) {
	ctx := t.Context()
	a, s := randomID(), randomID()
	c := requestClaim(3, "req-"+uniq(), a, s)
	_, _, err := adm.ClaimRequest(ctx, c, time.Hour)
	noErr(t, "ClaimRequest", err)

	stranger := c
	stranger.ReservationID = "rsv_other" + uniq()
	noErr(t, "ForgetRequest of another reservation", adm.ForgetRequest(ctx, c.UserID, c.RequestID, stranger, time.Millisecond))
	const wait = 30 * time.Millisecond
	time.Sleep(wait) // Redis expires keys on its own clock
	clock.Advance(wait)
	bound, existing, err := adm.ClaimRequest(ctx, requestClaim(3, c.RequestID, a, s), time.Hour)
	noErr(t, "ClaimRequest after forgetting another reservation", err)
	if !existing || !sameIDs(bound, c) {
		t.Fatalf("claim after ForgetRequest of another reservation = %+v, existing %v; want it untouched", bound, existing)
	}

	noErr(t, "ForgetRequest", adm.ForgetRequest(ctx, c.UserID, c.RequestID, c, time.Millisecond))
	noErr(t, "ForgetRequest again (idempotent)", adm.ForgetRequest(ctx, c.UserID, c.RequestID, c, time.Millisecond))
	time.Sleep(wait)
	clock.Advance(wait)
	_, err = adm.LookupOrder(ctx, c.UserID, c.OrderID)
	wantErr(t, "LookupOrder of a forgotten claim", err, ports.ErrNotFound)
	fresh := requestClaim(3, c.RequestID, a, s)
	bound, existing, err = adm.ClaimRequest(ctx, fresh, time.Hour)
	noErr(t, "ClaimRequest after ForgetRequest", err)
	if existing || !sameIDs(bound, fresh) {
		t.Fatalf("claim after ForgetRequest = %+v, existing %v; want fresh ids", bound, existing)
	}
}
