package contracttest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

func testSeed(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	a := testActivity(2)
	_, err := rs.Inventory(ctx, a.ActivityID, a.SKUID)
	wantErr(t, "Inventory of an unseeded activity SKU", err, ports.ErrNotFound)
	noErr(t, "SeedActivity", rs.SeedActivity(ctx, a))
	if inv := available(t, rs, a); inv.Available != 2 || len(inv.Held) != 0 {
		t.Fatalf("Inventory after seeding stock 2 = %+v, want 2 available, none held", inv)
	}
	reserve(t, rs, a, 1, baseTime.Add(time.Minute), baseTime.Add(time.Minute))
	again := a
	again.Stock = 9
	noErr(t, "SeedActivity again", rs.SeedActivity(ctx, again))
	if inv := available(t, rs, a); inv.Available != 1 {
		t.Fatalf("Inventory after reserving one unit and seeding again = %+v, want 1 available (never reset)", inv)
	}
}

func testReserveGuards(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	a := seeded(t, rs, 2)
	in := baseTime.Add(time.Minute)

	unknown := a
	unknown.ActivityID = a.ActivityID + 1
	_, err := rs.Reserve(ctx, newReservation(t, unknown, 1, in), in)
	wantErr(t, "Reserve in an unseeded activity", err, ports.ErrActivityNotFound)
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, a.StartsAt.Add(-time.Minute)), in)
	wantErr(t, "Reserve created before the window", err, ports.ErrActivityNotStarted)
	var ns *ports.NotStartedError
	if !errors.As(err, &ns) || !ns.StartsAt.Equal(a.StartsAt) {
		t.Fatalf("Reserve created before the window: %v, want a *ports.NotStartedError with StartsAt %s", err, a.StartsAt)
	}
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, a.EndsAt), in)
	wantErr(t, "Reserve created at ends_at (exclusive)", err, ports.ErrActivityEnded)
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, a.EndsAt.Add(time.Minute)), in)
	wantErr(t, "Reserve created after the window", err, ports.ErrActivityEnded)

	r1 := newReservation(t, a, 1, in)
	got, err := rs.Reserve(ctx, r1, in)
	noErr(t, "Reserve", err)
	checkReservation(t, got, r1, reservation.StatusPending)
	checkReservation(t, status(t, rs, r1), r1, reservation.StatusPending)
	if inv := available(t, rs, a); inv.Available != 1 || !slices.Equal(inv.Held, []string{r1.ReservationID}) {
		t.Fatalf("Inventory after one reserve = %+v, want 1 available, held [%s]", inv, r1.ReservationID)
	}

	_, err = rs.Reserve(ctx, newReservation(t, a, 1, in), in)
	wantErr(t, "second reservation of one user", err, ports.ErrAlreadyPurchased)
	var held *ports.HolderError
	if !errors.As(err, &held) || held.ReservationID != r1.ReservationID || held.OrderID != r1.OrderID {
		t.Fatalf("second reservation of one user: %v, want a *ports.HolderError naming %s / %s", err, r1.ReservationID, r1.OrderID)
	}
	reserve(t, rs, a, 2, in, in)
	_, err = rs.Reserve(ctx, newReservation(t, a, 3, in), in)
	wantErr(t, "Reserve without stock", err, ports.ErrSoldOut)

	got, err = rs.Reserve(ctx, r1, in)
	noErr(t, "Reserve repeated with the same reservation id (sold out by now)", err)
	checkReservation(t, got, r1, reservation.StatusPending)
	if inv := available(t, rs, a); inv.Available != 0 || len(inv.Held) != 2 {
		t.Fatalf("Inventory after a repeated Reserve = %+v, want 0 available, 2 held", inv)
	}
	_, err = rs.Get(ctx, ports.ReservationRef{ActivityID: a.ActivityID, SKUID: a.SKUID, ReservationID: "rsv_" + uniq()})
	wantErr(t, "Get of an unknown reservation", err, ports.ErrNotFound)

	t.Run("ActivitySwitch", func(t *testing.T) { testActivitySwitch(t, rs) })
}

// testActivitySwitch checks ports.ActivitySwitch on the adapter (every
// reservation adapter implements it) and the order of the entry's
// answers: ended, not started, paused, already purchased, sold out.
func testActivitySwitch(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	sw := activitySwitch(t, rs)
	in := baseTime.Add(time.Minute)

	unknown := testActivity(1)
	wantErr(t, "SetPaused of an unseeded activity SKU", sw.SetPaused(ctx, unknown, true), ports.ErrNotFound)
	wantErr(t, "SetEndsAt of an unseeded activity SKU", sw.SetEndsAt(ctx, unknown, in), ports.ErrNotFound)
	_, err := rs.Reserve(ctx, newReservation(t, unknown, 1, in), in)
	wantErr(t, "Reserve after a switch of an unseeded activity SKU (nothing seeded)", err, ports.ErrActivityNotFound)

	a := seeded(t, rs, 3)
	held := reserve(t, rs, a, 1, in, in)
	noErr(t, "SetPaused", sw.SetPaused(ctx, a, true))
	noErr(t, "SetPaused again (idempotent)", sw.SetPaused(ctx, a, true))
	for user := int64(2); user <= 7; user++ { // every lane of a laned SKU
		_, err = rs.Reserve(ctx, newReservation(t, a, user, in), in)
		wantErr(t, "Reserve of a paused sale", err, ports.ErrActivityPaused)
	}
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, in), in)
	wantErr(t, "Reserve of a paused sale by its holder (paused before already purchased)", err, ports.ErrActivityPaused)
	_, err = rs.Reserve(ctx, newReservation(t, a, 2, a.StartsAt.Add(-time.Second)), in)
	wantErr(t, "Reserve of a paused sale before it starts (not started before paused)", err, ports.ErrActivityNotStarted)
	_, err = rs.Reserve(ctx, newReservation(t, a, 2, a.EndsAt), in)
	wantErr(t, "Reserve of a paused sale after it ended (ended before paused)", err, ports.ErrActivityEnded)
	got, err := rs.Reserve(ctx, held, in)
	noErr(t, "Reserve repeated with a stored reservation id while paused", err)
	checkReservation(t, got, held, reservation.StatusPending)
	if inv := available(t, rs, a); inv.Available != 2 {
		t.Fatalf("Inventory of a paused sale = %+v, want the 2 units left untouched", inv)
	}

	noErr(t, "SetPaused false", sw.SetPaused(ctx, a, false))
	noErr(t, "SetPaused false again (idempotent)", sw.SetPaused(ctx, a, false))
	reserve(t, rs, a, 2, in, in)
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, in), in)
	wantErr(t, "Reserve by the holder after the resume", err, ports.ErrAlreadyPurchased)

	end := in.Add(10 * time.Minute)
	noErr(t, "SetEndsAt earlier", sw.SetEndsAt(ctx, a, end))
	noErr(t, "SetEndsAt earlier again (idempotent)", sw.SetEndsAt(ctx, a, end))
	reserve(t, rs, a, 3, end.Add(-time.Millisecond), in)
	_, err = rs.Reserve(ctx, newReservation(t, a, 4, end), in)
	wantErr(t, "Reserve at the moved ends_at", err, ports.ErrActivityEnded)
	_, err = rs.Reserve(ctx, newReservation(t, a, 5, end.Add(time.Minute)), in)
	wantErr(t, "Reserve after the moved ends_at (ended before sold out)", err, ports.ErrActivityEnded)
	_, err = rs.Reserve(ctx, newReservation(t, a, 5, end.Add(-time.Minute)), in)
	wantErr(t, "Reserve before the moved ends_at without stock", err, ports.ErrSoldOut)
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, end.Add(-time.Minute)), in)
	wantErr(t, "Reserve by a holder of a sold-out sale (already purchased before sold out)", err, ports.ErrAlreadyPurchased)
	later := a.EndsAt.Add(time.Hour)
	noErr(t, "SetEndsAt later", sw.SetEndsAt(ctx, a, later))
	_, err = rs.Reserve(ctx, newReservation(t, a, 6, end.Add(time.Minute)), in)
	wantErr(t, "Reserve after ends_at moved later again, without stock", err, ports.ErrSoldOut)

	p := a
	p.ActivityID = randomID()
	p.Paused = true
	noErr(t, "SeedActivity paused", rs.SeedActivity(ctx, p))
	_, err = rs.Reserve(ctx, newReservation(t, p, 1, in), in)
	wantErr(t, "Reserve of a sale seeded paused", err, ports.ErrActivityPaused)
	noErr(t, "SetPaused false of a sale seeded paused", sw.SetPaused(ctx, p, false))
	reserve(t, rs, p, 1, in, in)
}

// activitySwitch returns the adapter's ports.ActivitySwitch.
func activitySwitch(t *testing.T, rs ports.Reservations) ports.ActivitySwitch {
	t.Helper()
	if l, ok := rs.(lanedReservations); ok {
		rs = l.Reservations
	}
	sw, ok := rs.(ports.ActivitySwitch)
	if !ok {
		t.Fatalf("%T does not implement ports.ActivitySwitch", rs)
	}
	return sw
}

// checkReservation compares a stored reservation with the one reserved.
func checkReservation(t *testing.T, got, want reservation.Snapshot, st reservation.Status) {
	t.Helper()
	if got.ReservationID != want.ReservationID || got.OrderID != want.OrderID || got.MessageID != want.MessageID ||
		got.RequestID != want.RequestID || got.ActivityID != want.ActivityID || got.SKUID != want.SKUID ||
		got.UserID != want.UserID || got.Status != st || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.ValidUntil.Equal(want.ValidUntil) {
		t.Fatalf("stored reservation %+v, want %s %+v", got, st, want)
	}
}

func testReserveConcurrent(t *testing.T, rs ports.Reservations) {
	a := seeded(t, rs, 5)
	in := baseTime.Add(time.Minute)
	const users = 20
	errs := make([]error, users)
	parallel(users, func(i int) {
		_, errs[i] = rs.Reserve(t.Context(), newReservation(t, a, int64(i+1), in), in)
	})
	ok, soldOut := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ports.ErrSoldOut):
			soldOut++
		default:
			t.Fatalf("concurrent Reserve: %v", err)
		}
	}
	if ok != 5 || soldOut != users-5 {
		t.Fatalf("%d users reserving stock 5: %d reserved, %d sold out; want 5 and %d", users, ok, soldOut, users-5)
	}
	if inv := available(t, rs, a); inv.Available != 0 || len(inv.Held) != 5 {
		t.Fatalf("Inventory after the rush = %+v, want 0 available, 5 held", inv)
	}

	b := seeded(t, rs, 10)
	const tries = 6
	parallel(tries, func(i int) {
		_, errs[i] = rs.Reserve(t.Context(), newReservation(t, b, 42, in), in)
	})
	ok = 0
	for _, err := range errs[:tries] {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ports.ErrAlreadyPurchased):
		default:
			t.Fatalf("concurrent Reserve of one user: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("one user reserving %d times concurrently: %d reserved, want 1", tries, ok)
	}
	if inv := available(t, rs, b); inv.Available != 9 {
		t.Fatalf("Inventory after one user's concurrent reserves = %+v, want 9 available", inv)
	}
}

func testLifecycle(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	a := seeded(t, rs, 3)
	in := baseTime.Add(time.Minute)
	r1 := reserve(t, rs, a, 1, in, in)
	noErr(t, "MarkSent", rs.MarkSent(ctx, refOf(r1)))
	wantStatus(t, rs, r1, reservation.StatusSent)
	noErr(t, "MarkSent again", rs.MarkSent(ctx, refOf(r1)))
	wantStatus(t, rs, r1, reservation.StatusSent)

	unknown := ports.ReservationRef{ActivityID: a.ActivityID, SKUID: a.SKUID, ReservationID: "rsv_" + uniq()}
	noErr(t, "MarkOrdered with an unknown reservation", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(r1), unknown}))
	wantStatus(t, rs, r1, reservation.StatusOrdered)
	noErr(t, "MarkSent after ORDERED", rs.MarkSent(ctx, refOf(r1)))
	wantStatus(t, rs, r1, reservation.StatusOrdered)

	r2 := reserve(t, rs, a, 2, in, in)
	noErr(t, "MarkOrdered of a PENDING reservation", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(r2)}))
	wantStatus(t, rs, r2, reservation.StatusOrdered)

	before := available(t, rs, a).Available
	released, err := rs.Release(ctx, refOf(r1), reservation.ReasonOrderCanceled)
	noErr(t, "Release", err)
	got := status(t, rs, r1)
	if !released || got.Status != reservation.StatusReleased || got.ReleaseReason != reservation.ReasonOrderCanceled {
		t.Fatalf("Release = %v, stored %+v; want true, RELEASED with reason ORDER_CANCELED", released, got)
	}
	inv := available(t, rs, a)
	if inv.Available != before+1 || slices.Contains(inv.Held, r1.ReservationID) {
		t.Fatalf("Inventory after Release = %+v, want %d available and %s not held", inv, before+1, r1.ReservationID)
	}
	released, err = rs.Release(ctx, refOf(r1), reservation.ReasonExpired)
	noErr(t, "Release again", err)
	if released || available(t, rs, a).Available != before+1 {
		t.Fatalf("second Release = %v, available %d; want false, %d", released, available(t, rs, a).Available, before+1)
	}
	noErr(t, "MarkOrdered of a released reservation", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(r1)}))
	noErr(t, "MarkSent of a released reservation", rs.MarkSent(ctx, refOf(r1)))
	if got := status(t, rs, r1); got.Status != reservation.StatusReleased || got.ReleaseReason != reservation.ReasonOrderCanceled {
		t.Fatalf("released reservation became %+v", got)
	}

	// The user's slot is free again, and a stale release of the old
	// reservation does not free the new one's slot.
	r3 := reserve(t, rs, a, 1, in, in)
	released, err = rs.Release(ctx, refOf(r1), reservation.ReasonOrderCanceled)
	noErr(t, "stale Release", err)
	if released {
		t.Fatal("stale Release of a released reservation returned true")
	}
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, in), in)
	wantErr(t, "Reserve while the user holds a newer reservation", err, ports.ErrAlreadyPurchased)
	wantStatus(t, rs, r3, reservation.StatusPending)

	_, err = rs.Release(ctx, unknown, reservation.ReasonExpired)
	wantErr(t, "Release of an unknown reservation", err, ports.ErrNotFound)
}

func testReleaseConcurrent(t *testing.T, rs ports.Reservations) {
	a := seeded(t, rs, 4)
	in := baseTime.Add(time.Minute)
	r := reserve(t, rs, a, 1, in, in)
	const n = 8
	released := make([]bool, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		released[i], errs[i] = rs.Release(t.Context(), refOf(r), reservation.ReasonSendFailed)
	})
	count := 0
	for i := range n {
		noErr(t, "concurrent Release", errs[i])
		if released[i] {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d concurrent releases: %d returned true, want 1", n, count)
	}
	if inv := available(t, rs, a); inv.Available != 4 || len(inv.Held) != 0 {
		t.Fatalf("Inventory after concurrent releases = %+v, want 4 available, none held", inv)
	}
}

// testUnresolved checks that Unresolved lists exactly the PENDING and SENT
// reservations created before the cutoff, oldest first, within the limit.
func testUnresolved(t *testing.T, rs ports.Reservations) {
	a := seeded(t, rs, 10)
	var got []reservation.Snapshot
	for i := 1; i <= 4; i++ {
		got = append(got, reserve(t, rs, a, int64(900+i), baseTime.Add(time.Duration(i)*time.Second), baseTime.Add(time.Hour)))
	}
	noErr(t, "MarkSent", rs.MarkSent(t.Context(), refOf(got[1])))
	noErr(t, "MarkOrdered", rs.MarkOrdered(t.Context(), []ports.ReservationRef{refOf(got[2])}))
	_, err := rs.Release(t.Context(), refOf(got[3]), reservation.ReasonExpired)
	noErr(t, "Release", err)

	list, err := rs.Unresolved(t.Context(), baseTime.Add(time.Minute), 10)
	noErr(t, "Unresolved", err)
	if len(list) != 2 || list[0].ReservationID != got[0].ReservationID || list[1].ReservationID != got[1].ReservationID {
		t.Fatalf("Unresolved = %v, want the PENDING then the SENT reservation", ids(list))
	}
	list, err = rs.Unresolved(t.Context(), baseTime.Add(2*time.Second), 10)
	noErr(t, "Unresolved", err)
	if len(list) != 1 || list[0].ReservationID != got[0].ReservationID {
		t.Fatalf("Unresolved before the second = %v", ids(list))
	}
	list, err = rs.Unresolved(t.Context(), baseTime.Add(time.Minute), 1)
	noErr(t, "Unresolved", err)
	if len(list) != 1 {
		t.Fatalf("limit 1 returned %d", len(list))
	}
}

func ids(rs []reservation.Snapshot) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ReservationID
	}
	return out
}

// testMarkSentBatch checks that MarkSentBatch moves PENDING reservations to
// SENT and skips unknown and later ones.
func testMarkSentBatch(t *testing.T, rs ports.Reservations) {
	a := seeded(t, rs, 10)
	r1 := reserve(t, rs, a, 801, baseTime.Add(time.Second), baseTime.Add(time.Hour))
	r2 := reserve(t, rs, a, 802, baseTime.Add(time.Second), baseTime.Add(time.Hour))
	r3 := reserve(t, rs, a, 803, baseTime.Add(time.Second), baseTime.Add(time.Hour))
	noErr(t, "MarkOrdered", rs.MarkOrdered(t.Context(), []ports.ReservationRef{refOf(r3)}))
	unknown := ports.ReservationRef{ActivityID: a.ActivityID, SKUID: a.SKUID, ReservationID: "rsv_unknown_" + uniq()}
	noErr(t, "MarkSentBatch", rs.MarkSentBatch(t.Context(), []ports.ReservationRef{refOf(r1), unknown, refOf(r2), refOf(r3)}))
	wantStatus(t, rs, r1, reservation.StatusSent)
	wantStatus(t, rs, r2, reservation.StatusSent)
	wantStatus(t, rs, r3, reservation.StatusOrdered)
	due, err := rs.ClaimDue(t.Context(), baseTime.Add(2*time.Hour), 10, "owner", time.Minute)
	noErr(t, "ClaimDue", err)
	if len(due) != 0 {
		t.Fatalf("ClaimDue after MarkSentBatch = %v, want none pending", ids(due))
	}
}

// testReleaseMany checks ReleaseMany on a mixed batch over two activity
// SKUs: fresh reservations are released once with their reason, a
// reservation named twice and one released before report false, an
// unknown reservation and an unknown reason fail alone, a stale release
// never frees a newer reservation's user slot, and released reservations
// leave the scanner's and the reconciler's indexes.
func testReleaseMany(t *testing.T, rs ports.Reservations) {
	ctx := t.Context()
	a := seeded(t, rs, 5)
	b := seeded(t, rs, 5)
	in := baseTime.Add(time.Minute)
	r1 := reserve(t, rs, a, 1, in, in)
	r2 := reserve(t, rs, a, 2, in, in)
	r3 := reserve(t, rs, b, 3, in, in)
	r4 := reserve(t, rs, a, 4, in, in)
	r5 := reserve(t, rs, a, 5, in, in)
	noErr(t, "MarkSent", rs.MarkSent(ctx, refOf(r2)))
	noErr(t, "MarkOrdered", rs.MarkOrdered(ctx, []ports.ReservationRef{refOf(r3)}))
	released, err := rs.Release(ctx, refOf(r4), reservation.ReasonSendFailed)
	noErr(t, "Release", err)
	if !released {
		t.Fatal("Release of a PENDING reservation returned false")
	}
	if got := rs.ReleaseMany(ctx, nil); len(got) != 0 {
		t.Fatalf("ReleaseMany(nil) = %+v, want no results", got)
	}

	unknown := ports.ReservationRef{ActivityID: a.ActivityID, SKUID: a.SKUID, ReservationID: "rsv_" + uniq()}
	reqs := []ports.ReleaseRequest{
		{Ref: refOf(r1), Reason: reservation.ReasonOrderCanceled},
		{Ref: refOf(r3), Reason: reservation.ReasonOrderCanceled},
		{Ref: refOf(r1), Reason: reservation.ReasonExpired}, // named twice: the first request wins
		{Ref: unknown, Reason: reservation.ReasonOrderCanceled},
		{Ref: refOf(r4), Reason: reservation.ReasonOrderCanceled}, // released before
		{Ref: refOf(r5), Reason: reservation.ReleaseReason("NO_SUCH_REASON")},
		{Ref: refOf(r2), Reason: reservation.ReasonExpired},
	}
	got := rs.ReleaseMany(ctx, reqs)
	if len(got) != len(reqs) {
		t.Fatalf("ReleaseMany returned %d results for %d requests", len(got), len(reqs))
	}
	for i, want := range []bool{true, true, false, false, false, false, true} {
		switch {
		case i == 3:
			wantErr(t, "ReleaseMany of an unknown reservation", got[i].Err, ports.ErrNotFound)
		case i == 5:
			wantErr(t, "ReleaseMany with an unknown reason", got[i].Err, reservation.ErrInvalid)
		default:
			noErr(t, "ReleaseMany request "+reqs[i].Ref.ReservationID, got[i].Err)
		}
		if got[i].Released != want {
			t.Fatalf("ReleaseMany result %d (%s) = %+v, want released %v", i, reqs[i].Ref.ReservationID, got[i], want)
		}
	}
	for _, c := range []struct {
		r      reservation.Snapshot
		reason reservation.ReleaseReason
	}{{r1, reservation.ReasonOrderCanceled}, {r2, reservation.ReasonExpired}, {r3, reservation.ReasonOrderCanceled}, {r4, reservation.ReasonSendFailed}} {
		if st := status(t, rs, c.r); st.Status != reservation.StatusReleased || st.ReleaseReason != c.reason {
			t.Fatalf("reservation %s after ReleaseMany: %s %s, want RELEASED %s", c.r.ReservationID, st.Status, st.ReleaseReason, c.reason)
		}
	}
	wantStatus(t, rs, r5, reservation.StatusPending)
	if inv := available(t, rs, a); inv.Available != 4 || !slices.Equal(inv.Held, []string{r5.ReservationID}) {
		t.Fatalf("Inventory of the first SKU = %+v, want 4 available and only %s held", inv, r5.ReservationID)
	}
	if inv := available(t, rs, b); inv.Available != 5 || len(inv.Held) != 0 {
		t.Fatalf("Inventory of the second SKU = %+v, want 5 available, none held", inv)
	}
	list, err := rs.Unresolved(ctx, baseTime.Add(time.Hour), 10)
	noErr(t, "Unresolved", err)
	if !sameSet(ids(list), []string{r5.ReservationID}) {
		t.Fatalf("Unresolved after ReleaseMany = %v, want only %s", ids(list), r5.ReservationID)
	}
	due, err := rs.ClaimDue(ctx, baseTime.Add(time.Hour), 10, "owner", time.Minute)
	noErr(t, "ClaimDue", err)
	if !sameSet(ids(due), []string{r5.ReservationID}) {
		t.Fatalf("ClaimDue after ReleaseMany = %v, want only %s", ids(due), r5.ReservationID)
	}

	// User 1 buys again; a stale batch naming the old reservation changes
	// nothing and leaves the new holder in place.
	r6 := reserve(t, rs, a, 1, in, in)
	got = rs.ReleaseMany(ctx, []ports.ReleaseRequest{{Ref: refOf(r1), Reason: reservation.ReasonOrderCanceled}})
	if len(got) != 1 || got[0].Released || got[0].Err != nil {
		t.Fatalf("stale ReleaseMany = %+v, want one result, not released, no error", got)
	}
	_, err = rs.Reserve(ctx, newReservation(t, a, 1, in), in)
	wantErr(t, "Reserve while the user holds a newer reservation", err, ports.ErrAlreadyPurchased)
	wantStatus(t, rs, r6, reservation.StatusPending)
	if inv := available(t, rs, a); inv.Available != 3 {
		t.Fatalf("Inventory after the stale ReleaseMany = %+v, want 3 available", inv)
	}
}

// testReleaseManyConcurrent checks that overlapping batches released
// concurrently (and a single Release among them) give every unit back
// exactly once.
func testReleaseManyConcurrent(t *testing.T, rs ports.Reservations) {
	a := seeded(t, rs, 12)
	b := seeded(t, rs, 12)
	in := baseTime.Add(time.Minute)
	var reqs []ports.ReleaseRequest
	for i := range 8 {
		for _, act := range []ports.Activity{a, b} {
			r := reserve(t, rs, act, int64(100+i), in, in)
			reqs = append(reqs, ports.ReleaseRequest{Ref: refOf(r), Reason: reservation.ReasonOrderCanceled})
		}
	}
	const callers = 6
	results := make([][]ports.ReleaseResult, callers)
	single := make([]bool, callers)
	singleErrs := make([]error, callers)
	parallel(callers, func(i int) {
		batch := slices.Clone(reqs)
		if i%2 == 1 {
			slices.Reverse(batch)
		}
		results[i] = rs.ReleaseMany(t.Context(), batch)
		single[i], singleErrs[i] = rs.Release(t.Context(), reqs[0].Ref, reservation.ReasonOrderCanceled)
	})
	count := map[string]int{}
	for i, res := range results {
		noErr(t, "concurrent Release", singleErrs[i])
		if len(res) != len(reqs) {
			t.Fatalf("caller %d: %d results for %d requests", i, len(res), len(reqs))
		}
		for _, r := range res {
			noErr(t, "concurrent ReleaseMany", r.Err)
		}
		batch := slices.Clone(reqs)
		if i%2 == 1 {
			slices.Reverse(batch)
		}
		for k, r := range res {
			if r.Released {
				count[batch[k].Ref.ReservationID]++
			}
		}
		if single[i] {
			count[reqs[0].Ref.ReservationID]++
		}
	}
	for _, r := range reqs {
		if count[r.Ref.ReservationID] != 1 {
			t.Fatalf("reservation %s released %d times by %d concurrent callers, want once", r.Ref.ReservationID, count[r.Ref.ReservationID], callers)
		}
	}
	for _, act := range []ports.Activity{a, b} {
		if inv := available(t, rs, act); inv.Available != 12 || len(inv.Held) != 0 {
			t.Fatalf("Inventory after concurrent releases = %+v, want 12 available, none held", inv)
		}
	}
}
