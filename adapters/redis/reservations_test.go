package redis

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

func TestSeedActivityIsIdempotentAndNeverResetsStock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	_, err := f.s.Inventory(ctx, 1, 1)
	wantErr(t, err, ports.ErrNotFound)

	a := f.seed(1, 1, 3)
	f.reserve(1, 1, 100, testBase, testBase)
	a.Stock = 50
	if err := f.s.SeedActivity(ctx, a); err != nil {
		t.Fatalf("second seed: %v", err)
	}
	if inv := f.inventory(1, 1); inv.Available != 2 || len(inv.Held) != 1 {
		t.Fatalf("inventory after reseed = %+v, want 2 available, 1 held", inv)
	}
	rules := f.c.HGetAll(ctx, f.s.keys.slot(1, 1).rules).Val()
	want := map[string]string{
		"initial": "3", "starts_ms": itoa(ms(testBase.Add(-time.Hour))), "ends_ms": itoa(ms(testBase.Add(time.Hour))),
		"reservation_ttl_ms": "30000", "payment_timeout_ms": "900000",
	}
	for k, v := range want {
		if rules[k] != v {
			t.Fatalf("rules[%s] = %q, want %q (all: %v)", k, rules[k], v, rules)
		}
	}
	if !f.c.SIsMember(ctx, f.s.keys.slots(), "a1:s1").Val() {
		t.Fatal("slot not registered in the slots set")
	}

	var fe *ports.FieldError
	bad := a
	bad.EndsAt = bad.StartsAt
	if err := f.s.SeedActivity(ctx, bad); !errors.As(err, &fe) {
		t.Fatalf("seed with empty window: %v, want *ports.FieldError", err)
	}
	bad = a
	bad.Stock = -1
	if err := f.s.SeedActivity(ctx, bad); !errors.As(err, &fe) {
		t.Fatalf("seed with negative stock: %v, want *ports.FieldError", err)
	}
}

func TestReserveStoresReservationAndIndexes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(4, 5, 10)
	r := f.newRsv(4, 5, 77, testBase)
	first := testBase.Add(200 * time.Millisecond)
	got, err := f.s.Reserve(ctx, r, first)
	if err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Fatalf("Reserve returned %+v, want %+v", got, r)
	}
	stored, err := f.s.Get(ctx, ref(r))
	if err != nil || stored != r {
		t.Fatalf("Get = %+v, %v; want %+v", stored, err, r)
	}
	st := f.get(r)
	if st.Status != reservation.StatusPending || st.Version != 1 || st.SendAttempt != 0 ||
		!st.NextRetryAt.Equal(first) || st.LeaseOwner != "" || !st.LeaseUntil.IsZero() {
		t.Fatalf("stored scanner fields = %+v", st)
	}
	sk := f.s.keys.slot(4, 5)
	if got := f.zscore(sk.pending, r.ReservationID); got != ms(first) {
		t.Fatalf("pending score = %d, want %d", got, ms(first))
	}
	if got := f.zscore(sk.unresolved, r.ReservationID); got != ms(testBase) {
		t.Fatalf("unresolved score = %d, want %d", got, ms(testBase))
	}
	if got := f.zscore(sk.pendingCreated, r.ReservationID); got != ms(testBase) {
		t.Fatalf("pending_created score = %d, want %d", got, ms(testBase))
	}
	inv := f.inventory(4, 5)
	if inv.Available != 9 || !slices.Equal(inv.Held, []string{r.ReservationID}) {
		t.Fatalf("inventory = %+v", inv)
	}
	if h := f.c.HGet(ctx, sk.holders, "77").Val(); h != r.ReservationID {
		t.Fatalf("holder of user 77 = %q", h)
	}
	_, err = f.s.Get(ctx, ports.ReservationRef{ActivityID: 4, SKUID: 5, ReservationID: "rsv_nope"})
	wantErr(t, err, ports.ErrNotFound)
}

func TestReserveRejections(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 1)

	cases := []struct {
		name     string
		activity int64
		at       time.Time
		want     error
	}{
		{"unknown activity", 99, testBase, ports.ErrActivityNotFound},
		{"before start", 1, testBase.Add(-time.Hour - time.Millisecond), ports.ErrActivityNotStarted},
		{"at end (exclusive)", 1, testBase.Add(time.Hour), ports.ErrActivityEnded},
		{"after end", 1, testBase.Add(2 * time.Hour), ports.ErrActivityEnded},
	}
	for _, c := range cases {
		_, err := f.s.Reserve(ctx, f.newRsv(c.activity, 1, 5, c.at), c.at)
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// The first millisecond of the window is open.
	f.reserve(1, 1, 5, testBase.Add(-time.Hour), testBase)
	_, err := f.s.Reserve(ctx, f.newRsv(1, 1, 5, testBase), testBase)
	wantErr(t, err, ports.ErrAlreadyPurchased)
	_, err = f.s.Reserve(ctx, f.newRsv(1, 1, 6, testBase), testBase)
	wantErr(t, err, ports.ErrSoldOut)
	if inv := f.inventory(1, 1); inv.Available != 0 || len(inv.Held) != 1 {
		t.Fatalf("inventory = %+v", inv)
	}
	// Invalid input never reaches Redis.
	bad := f.newRsv(1, 1, 7, testBase)
	bad.Status = reservation.StatusSent
	_, err = f.s.Reserve(ctx, bad, testBase)
	wantErr(t, err, reservation.ErrInvalid)
}

func TestReserveSameIDsConcurrentlyCreatesOne(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(2, 3, 10)
	r := f.newRsv(2, 3, 42, testBase)
	const n = 50
	var (
		wg   sync.WaitGroup
		got  [n]reservation.Snapshot
		errs [n]error
	)
	for i := range n {
		wg.Go(func() { got[i], errs[i] = f.s.Reserve(ctx, r, testBase) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != r {
			t.Fatalf("call %d = %+v, %v; want %+v", i, got[i], errs[i], r)
		}
	}
	inv := f.inventory(2, 3)
	if inv.Available != 9 || len(inv.Held) != 1 {
		t.Fatalf("inventory = %+v, want 9 available and 1 held", inv)
	}
	// Once stored, a repeat returns the stored state, even after changes.
	if err := f.s.MarkSent(ctx, ref(r)); err != nil {
		t.Fatal(err)
	}
	again, err := f.s.Reserve(ctx, r, testBase)
	if err != nil || again.Status != reservation.StatusSent || again.Version != 2 {
		t.Fatalf("repeat after MarkSent = %+v, %v", again, err)
	}
}

// TestReserveNoOversell is invariant I1 at the adapter level: 3,000 users
// race twice each for 1,000 units.
func TestReserveNoOversell(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	const (
		stock    = 1000
		users    = 3000
		attempts = 2
	)
	f.seed(7, 8, stock)
	snaps := make([]reservation.Snapshot, users*attempts)
	for i := range snaps {
		snaps[i] = f.newRsv(7, 8, int64(i%users)+1, testBase)
	}
	var (
		wg                          sync.WaitGroup
		ok, soldOut, already, other atomic.Int64
		start                       = make(chan struct{})
	)
	for u := range users {
		wg.Go(func() {
			<-start
			for a := range attempts {
				_, err := f.s.Reserve(ctx, snaps[a*users+u], testBase)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ports.ErrSoldOut):
					soldOut.Add(1)
				case errors.Is(err, ports.ErrAlreadyPurchased):
					already.Add(1)
				default:
					other.Add(1)
					t.Errorf("user %d attempt %d: %v", u, a, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != stock || other.Load() != 0 {
		t.Fatalf("reserved %d (errors %d), want exactly %d", ok.Load(), other.Load(), stock)
	}
	// Every winner's second attempt is "already purchased".
	if already.Load() < stock {
		t.Fatalf("already purchased = %d, want >= %d", already.Load(), stock)
	}
	inv := f.inventory(7, 8)
	if inv.Available != 0 || len(inv.Held) != stock {
		t.Fatalf("inventory = %d available, %d held; want 0 and %d", inv.Available, len(inv.Held), stock)
	}
	t.Logf("reserved=%d sold_out=%d already_purchased=%d", ok.Load(), soldOut.Load(), already.Load())
}

func TestMarkSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 5)
	r := f.reserve(1, 1, 1, testBase, testBase)
	if err := f.s.MarkSent(ctx, ref(r)); err != nil {
		t.Fatal(err)
	}
	st := f.get(r)
	if st.Status != reservation.StatusSent || st.Version != 2 {
		t.Fatalf("after MarkSent: %+v", st)
	}
	sk := f.s.keys.slot(1, 1)
	if f.zscore(sk.pending, r.ReservationID) != -1 || f.zscore(sk.pendingCreated, r.ReservationID) != -1 {
		t.Fatal("still indexed as pending after MarkSent")
	}
	if f.zscore(sk.unresolved, r.ReservationID) == -1 {
		t.Fatal("MarkSent removed the reservation from unresolved")
	}
	if err := f.s.MarkSent(ctx, ref(r)); err != nil {
		t.Fatal(err)
	}
	if st := f.get(r); st.Version != 2 {
		t.Fatalf("second MarkSent changed the version to %d", st.Version)
	}
	// No-op after release.
	r2 := f.reserve(1, 1, 2, testBase, testBase)
	if _, err := f.s.Release(ctx, ref(r2), reservation.ReasonSendFailed); err != nil {
		t.Fatal(err)
	}
	if err := f.s.MarkSent(ctx, ref(r2)); err != nil {
		t.Fatal(err)
	}
	if st := f.get(r2); st.Status != reservation.StatusReleased {
		t.Fatalf("MarkSent after release: status %s", st.Status)
	}
	err := f.s.MarkSent(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: "rsv_nope"})
	wantErr(t, err, ports.ErrNotFound)
}

func TestScheduleRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 5)
	sk := f.s.keys.slot(1, 1)
	r := f.reserve(1, 1, 1, testBase, testBase)

	claimed, err := f.s.ClaimDue(ctx, testBase, 10, "A", 10*time.Second)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimDue = %v, %v", claimed, err)
	}
	// Another owner's retry does not steal A's lease: due when it ends.
	if err := f.s.ScheduleRetry(ctx, ref(r), "B", testBase.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	st := f.get(r)
	if st.LeaseOwner != "A" || f.zscore(sk.pending, r.ReservationID) != ms(testBase.Add(10*time.Second)) {
		t.Fatalf("after B's retry: owner %q, score %d", st.LeaseOwner, f.zscore(sk.pending, r.ReservationID))
	}
	// The lease holder's retry drops the lease and sets the next attempt.
	next := testBase.Add(3 * time.Second)
	if err := f.s.ScheduleRetry(ctx, ref(r), "A", next); err != nil {
		t.Fatal(err)
	}
	st = f.get(r)
	if st.Status != reservation.StatusPending || st.LeaseOwner != "" || !st.LeaseUntil.IsZero() ||
		!st.NextRetryAt.Equal(next) || f.zscore(sk.pending, r.ReservationID) != ms(next) {
		t.Fatalf("after A's retry: %+v score %d", st, f.zscore(sk.pending, r.ReservationID))
	}
	if st.Version != 3 || st.SendAttempt != 1 {
		t.Fatalf("version %d send_attempt %d, want 3 and 1", st.Version, st.SendAttempt)
	}
	// Not due before next.
	if got, _ := f.s.ClaimDue(ctx, next.Add(-time.Millisecond), 10, "C", time.Second); len(got) != 0 {
		t.Fatalf("claimed before next: %v", got)
	}
	// A no-op once SENT.
	if err := f.s.MarkSent(ctx, ref(r)); err != nil {
		t.Fatal(err)
	}
	if err := f.s.ScheduleRetry(ctx, ref(r), "", next); err != nil {
		t.Fatal(err)
	}
	if st := f.get(r); st.Status != reservation.StatusSent || f.zscore(sk.pending, r.ReservationID) != -1 {
		t.Fatalf("retry after SENT: %+v", st)
	}
	err = f.s.ScheduleRetry(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: "rsv_nope"}, "", next)
	wantErr(t, err, ports.ErrNotFound)
}

func TestReleaseOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 2)
	sk := f.s.keys.slot(1, 1)
	r := f.reserve(1, 1, 1, testBase, testBase)

	const n = 20
	var (
		wg       sync.WaitGroup
		released atomic.Int64
	)
	for range n {
		wg.Go(func() {
			ok, err := f.s.Release(ctx, ref(r), reservation.ReasonOrderCanceled)
			if err != nil {
				t.Errorf("Release: %v", err)
			}
			if ok {
				released.Add(1)
			}
		})
	}
	wg.Wait()
	if released.Load() != 1 {
		t.Fatalf("%d releases reported, want 1 (I4)", released.Load())
	}
	if inv := f.inventory(1, 1); inv.Available != 2 || len(inv.Held) != 0 {
		t.Fatalf("inventory = %+v, want 2 available", inv)
	}
	st := f.get(r)
	if st.Status != reservation.StatusReleased || st.ReleaseReason != reservation.ReasonOrderCanceled || st.Version != 2 {
		t.Fatalf("after release: %+v", st)
	}
	for _, key := range []string{sk.pending, sk.unresolved, sk.pendingCreated} {
		if f.zscore(key, r.ReservationID) != -1 {
			t.Fatalf("still in %s after release", key)
		}
	}
	// The user may buy again.
	f.reserve(1, 1, 1, testBase, testBase)

	_, err := f.s.Release(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: "rsv_nope"}, reservation.ReasonSendFailed)
	wantErr(t, err, ports.ErrNotFound)
	_, err = f.s.Release(ctx, ref(r), "BOGUS")
	wantErr(t, err, reservation.ErrInvalid)
}

func TestReleaseKeepsAHolderEntryOfAnotherReservation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 5)
	sk := f.s.keys.slot(1, 1)
	r := f.reserve(1, 1, 1, testBase, testBase)
	// Simulate a holder entry that moved on to another reservation.
	f.c.HSet(ctx, sk.holders, "1", "rsv_other")
	if ok, err := f.s.Release(ctx, ref(r), reservation.ReasonExpired); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if h := f.c.HGet(ctx, sk.holders, "1").Val(); h != "rsv_other" {
		t.Fatalf("holder entry = %q, want rsv_other kept", h)
	}
}

func TestMarkOrdered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 5)
	f.seed(2, 1, 5)
	pending := f.reserve(1, 1, 1, testBase, testBase)
	sent := f.reserve(1, 1, 2, testBase, testBase)
	released := f.reserve(1, 1, 3, testBase, testBase)
	other := f.reserve(2, 1, 1, testBase, testBase)
	if err := f.s.MarkSent(ctx, ref(sent)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Release(ctx, ref(released), reservation.ReasonSendFailed); err != nil {
		t.Fatal(err)
	}
	unknown := ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: "rsv_nope"}
	refs := []ports.ReservationRef{ref(pending), ref(sent), ref(released), ref(other), unknown, ref(pending)}
	if err := f.s.MarkOrdered(ctx, refs); err != nil {
		t.Fatal(err)
	}
	for _, r := range []reservation.Snapshot{pending, sent, other} {
		st := f.get(r)
		if st.Status != reservation.StatusOrdered {
			t.Fatalf("%s: status %s, want ORDERED", r.ReservationID, st.Status)
		}
		sk := f.s.keys.slot(r.ActivityID, r.SKUID)
		for _, key := range []string{sk.pending, sk.unresolved, sk.pendingCreated} {
			if f.zscore(key, r.ReservationID) != -1 {
				t.Fatalf("%s still in %s", r.ReservationID, key)
			}
		}
	}
	if st := f.get(pending); st.Version != 2 {
		t.Fatalf("pending ordered twice in one batch: version %d", st.Version)
	}
	if st := f.get(released); st.Status != reservation.StatusReleased {
		t.Fatalf("released became %s", st.Status)
	}
	if _, err := f.s.Get(ctx, unknown); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("MarkOrdered created an unknown reservation: %v", err)
	}
	// An ordered reservation still holds its unit; a canceled order
	// releases it.
	if inv := f.inventory(1, 1); inv.Available != 3 || len(inv.Held) != 2 {
		t.Fatalf("inventory = %+v", inv)
	}
	if ok, err := f.s.Release(ctx, ref(pending), reservation.ReasonOrderCanceled); err != nil || !ok {
		t.Fatalf("release of ORDERED = %v, %v", ok, err)
	}
	if inv := f.inventory(1, 1); inv.Available != 4 {
		t.Fatalf("inventory after cancel = %+v", inv)
	}
	if err := f.s.MarkOrdered(ctx, nil); err != nil {
		t.Fatal(err)
	}
}
