package contracttest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// claimDue calls ClaimDue and returns the claimed reservations by id.
func claimDue(t *testing.T, rs ports.Reservations, now time.Time, limit int, owner string, lease time.Duration) map[string]reservation.Snapshot {
	t.Helper()
	got, err := rs.ClaimDue(t.Context(), now, limit, owner, lease)
	noErr(t, "ClaimDue", err)
	out := make(map[string]reservation.Snapshot, len(got))
	for _, r := range got {
		if _, dup := out[r.ReservationID]; dup {
			t.Fatalf("ClaimDue returned %s twice", r.ReservationID)
		}
		out[r.ReservationID] = r
	}
	return out
}

func wantClaimed(t *testing.T, what string, got map[string]reservation.Snapshot, want ...reservation.Snapshot) {
	t.Helper()
	ids := make([]string, 0, len(want))
	for _, r := range want {
		ids = append(ids, r.ReservationID)
	}
	gotIDs := make([]string, 0, len(got))
	for id := range got {
		gotIDs = append(gotIDs, id)
	}
	if !sameSet(gotIDs, ids) {
		t.Fatalf("%s: claimed %v, want %v", what, gotIDs, ids)
	}
}

func testClaimDueLeases(t *testing.T, rs ports.Reservations) {
	a1, a2 := seeded(t, rs, 10), seeded(t, rs, 10)
	at := func(d time.Duration) time.Time { return baseTime.Add(d) }
	rA := reserve(t, rs, a1, 1, at(time.Second), at(10*time.Second))
	rB := reserve(t, rs, a2, 1, at(time.Second), at(20*time.Second))
	rC := reserve(t, rs, a1, 2, at(time.Second), at(30*time.Second))
	const lease = 30 * time.Second

	wantClaimed(t, "before anything is due", claimDue(t, rs, at(5*time.Second), 10, "a", lease))
	got := claimDue(t, rs, at(25*time.Second), 10, "a", lease)
	wantClaimed(t, "at +25s, across activity SKUs", got, rA, rB)
	for _, r := range []reservation.Snapshot{rA, rB} {
		if got[r.ReservationID].SendAttempt != r.SendAttempt+1 {
			t.Fatalf("send attempt after the first claim = %d, want %d", got[r.ReservationID].SendAttempt, r.SendAttempt+1)
		}
		if got[r.ReservationID].Status != reservation.StatusPending {
			t.Fatalf("claimed reservation is %s, want PENDING", got[r.ReservationID].Status)
		}
	}
	wantClaimed(t, "at +26s by another owner (leased)", claimDue(t, rs, at(26*time.Second), 10, "b", lease))
	wantClaimed(t, "at +31s by another owner", claimDue(t, rs, at(31*time.Second), 10, "b", lease), rC)
	again := claimDue(t, rs, at(56*time.Second), 10, "b", lease)
	wantClaimed(t, "at +56s, after the first lease ended", again, rA, rB)
	if again[rA.ReservationID].SendAttempt != rA.SendAttempt+2 {
		t.Fatalf("send attempt after the second claim = %d, want %d", again[rA.ReservationID].SendAttempt, rA.SendAttempt+2)
	}
}

func testScheduleRetry(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	a := seeded(t, rs, 10)
	at := func(d time.Duration) time.Time { return baseTime.Add(d) }
	r := reserve(t, rs, a, 1, at(0), at(0))
	const lease = time.Minute
	wantClaimed(t, "due at once", claimDue(t, rs, at(0), 10, "a", lease), r)

	noErr(t, "ScheduleRetry by the lease owner", rs.ScheduleRetry(ctx, refOf(r), "a", at(5*time.Second)))
	wantStatus(t, rs, r, reservation.StatusPending)
	wantClaimed(t, "before the retry time", claimDue(t, rs, at(4*time.Second), 10, "c", lease))
	wantClaimed(t, "at the retry time (lease dropped)", claimDue(t, rs, at(5*time.Second), 10, "c", lease), r)

	// Another owner's reschedule does not break c's lease (until +65s).
	noErr(t, "ScheduleRetry by another owner", rs.ScheduleRetry(ctx, refOf(r), "x", at(6*time.Second)))
	wantClaimed(t, "during c's lease", claimDue(t, rs, at(10*time.Second), 10, "d", lease))
	wantClaimed(t, "after c's lease", claimDue(t, rs, at(66*time.Second), 10, "d", lease), r)

	sent := reserve(t, rs, a, 2, at(0), at(0))
	noErr(t, "MarkSent", rs.MarkSent(ctx, refOf(sent)))
	noErr(t, "ScheduleRetry of a SENT reservation", rs.ScheduleRetry(ctx, refOf(sent), "a", at(0)))
	wantStatus(t, rs, sent, reservation.StatusSent)
	if _, ok := claimDue(t, rs, at(time.Hour), 10, "e", lease)[sent.ReservationID]; ok {
		t.Fatal("ClaimDue claimed a SENT reservation after ScheduleRetry")
	}
}

func testClaimDueOnlyPending(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	a := seeded(t, rs, 10)
	in := baseTime.Add(time.Second)
	pending := reserve(t, rs, a, 1, in, in)
	sent := reserve(t, rs, a, 2, in, in)
	ordered := reserve(t, rs, a, 3, in, in)
	released := reserve(t, rs, a, 4, in, in)
	noErr(t, "MarkSent", rs.MarkSent(ctx, refOf(sent)))
	noErr(t, "MarkOrdered", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(ordered)}))
	_, err := rs.Release(ctx, refOf(released), reservation.ReasonSendFailed)
	noErr(t, "Release", err)
	wantClaimed(t, "only PENDING", claimDue(t, rs, baseTime.Add(time.Hour), 10, "a", time.Minute), pending)
	wantClaimed(t, "limit 0", claimDue(t, rs, baseTime.Add(3*time.Hour), 0, "a", time.Minute))
}

func testClaimDueConcurrent(t *testing.T, rs ports.Reservations) {
	a := seeded(t, rs, 20)
	in := baseTime.Add(time.Second)
	var all []reservation.Snapshot
	for u := range 10 {
		all = append(all, reserve(t, rs, a, int64(u+1), in, in))
	}
	now := baseTime.Add(time.Minute)
	first := claimDue(t, rs, now, 3, "a", time.Minute)
	if len(first) != 3 {
		t.Fatalf("ClaimDue with limit 3 claimed %d", len(first))
	}
	const owners = 4
	results := make([][]reservation.Snapshot, owners)
	errs := make([]error, owners)
	parallel(owners, func(i int) {
		results[i], errs[i] = rs.ClaimDue(t.Context(), now, 10, fmt.Sprintf("owner-%d", i), time.Minute)
	})
	var ids []string
	for id := range first {
		ids = append(ids, id)
	}
	for i := range owners {
		noErr(t, "concurrent ClaimDue", errs[i])
		for _, r := range results[i] {
			ids = append(ids, r.ReservationID)
		}
	}
	want := make([]string, 0, len(all))
	for _, r := range all {
		want = append(want, r.ReservationID)
	}
	slices.Sort(ids)
	if !sameSet(ids, want) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatalf("claims of one limited and %d concurrent callers = %v; want each of the 10 exactly once", owners, ids)
	}
}

func testBacklog(t *testing.T, rs ports.Reservations, bl ports.Backlog) {
	ctx := t.Context()
	stats := func() ports.BacklogStats {
		t.Helper()
		st, err := bl.Stats(ctx)
		noErr(t, "Stats", err)
		return st
	}
	check := func(what string, unresolved int64, oldestUnresolved time.Time, pending int64, oldestPending time.Time) {
		t.Helper()
		st := stats()
		if st.Unresolved != unresolved || !st.OldestUnresolvedAt.Equal(oldestUnresolved) ||
			st.PendingSend != pending || !st.OldestPendingSendAt.Equal(oldestPending) {
			t.Fatalf("%s: Stats = %+v; want unresolved %d (oldest %v), pending send %d (oldest %v)",
				what, st, unresolved, oldestUnresolved, pending, oldestPending)
		}
	}
	// The shortest validity among the SKUs holding an unresolved
	// reservation (a2's is shorter than a1's).
	ttl := func(what string, want time.Duration) {
		t.Helper()
		if got := stats().ShortestUnresolvedTTL; got != want {
			t.Fatalf("%s: ShortestUnresolvedTTL = %s, want %s", what, got, want)
		}
	}
	var zero time.Time
	check("empty", 0, zero, 0, zero)
	ttl("empty", 0)
	a1 := seeded(t, rs, 10)
	a2 := testActivity(10)
	a2.ReservationTTL = a1.ReservationTTL / 2
	noErr(t, "SeedActivity", rs.SeedActivity(ctx, a2))
	ttl("seeded, nothing reserved", 0)
	at := func(d time.Duration) time.Time { return baseTime.Add(d) }
	r1 := reserve(t, rs, a1, 1, at(1*time.Second), at(time.Hour))
	ttl("one reserved of a1", a1.ReservationTTL)
	r2 := reserve(t, rs, a2, 1, at(2*time.Second), at(time.Hour))
	r3 := reserve(t, rs, a1, 2, at(3*time.Second), at(time.Hour))
	check("three reserved", 3, at(time.Second), 3, at(time.Second))
	ttl("three reserved", a2.ReservationTTL)
	noErr(t, "MarkSent", rs.MarkSent(ctx, refOf(r1)))
	check("oldest sent", 3, at(time.Second), 2, at(2*time.Second))
	noErr(t, "MarkOrdered", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(r1)}))
	check("oldest ordered", 2, at(2*time.Second), 2, at(2*time.Second))
	_, err := rs.Release(ctx, refOf(r2), reservation.ReasonSendFailed)
	noErr(t, "Release", err)
	check("second released", 1, at(3*time.Second), 1, at(3*time.Second))
	ttl("a2's released", a1.ReservationTTL)
	noErr(t, "MarkOrdered", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(r3)}))
	check("all resolved", 0, zero, 0, zero)
	ttl("all resolved", 0)
}
