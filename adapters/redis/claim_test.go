package redis

import (
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
)

func TestClaimDueLeasesDueReservationsUpToLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 100)
	f.seed(2, 2, 100)
	due := map[string]bool{}
	for u := range int64(6) {
		due[f.reserve(1, 1, u+1, testBase, testBase).ReservationID] = true
		due[f.reserve(2, 2, u+1, testBase, testBase.Add(-time.Second)).ReservationID] = true
	}
	later := f.reserve(1, 1, 99, testBase, testBase.Add(time.Minute))
	sent := f.reserve(2, 2, 99, testBase, testBase)
	if err := f.s.MarkSent(ctx, ref(sent)); err != nil {
		t.Fatal(err)
	}

	lease := 5 * time.Second
	seen := map[string]bool{}
	for round := range 3 {
		got, err := f.s.ClaimDue(ctx, testBase, 5, "A", lease)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{5, 5, 2}[round]; len(got) != want {
			t.Fatalf("round %d claimed %d, want %d", round, len(got), want)
		}
		for _, r := range got {
			if !due[r.ReservationID] || seen[r.ReservationID] {
				t.Fatalf("round %d claimed %s (due %v, seen %v)", round, r.ReservationID, due[r.ReservationID], seen[r.ReservationID])
			}
			seen[r.ReservationID] = true
			if r.SendAttempt != 1 || r.Status != reservation.StatusPending {
				t.Fatalf("claimed %+v", r)
			}
			st := f.get(r)
			sk := f.s.keys.slot(r.ActivityID, r.SKUID)
			if st.LeaseOwner != "A" || !st.LeaseUntil.Equal(testBase.Add(lease)) ||
				f.zscore(sk.pending, r.ReservationID) != ms(testBase.Add(lease)) {
				t.Fatalf("lease of %s: %+v", r.ReservationID, st)
			}
		}
	}
	if got, err := f.s.ClaimDue(ctx, testBase.Add(lease-time.Millisecond), 100, "B", lease); err != nil || len(got) != 0 {
		t.Fatalf("claimed during leases: %v, %v", got, err)
	}
	if st := f.get(later); st.SendAttempt != 0 || st.LeaseOwner != "" {
		t.Fatalf("not-yet-due reservation was claimed: %+v", st)
	}
	if got, err := f.s.ClaimDue(ctx, testBase, 0, "A", lease); err != nil || len(got) != 0 {
		t.Fatalf("limit 0: %v, %v", got, err)
	}
}

func TestClaimDueConcurrentOwnersGetDisjointSets(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	const perSlot = 100
	f.seed(1, 1, perSlot)
	f.seed(1, 2, perSlot)
	all := map[string]bool{}
	for u := range int64(perSlot) {
		all[f.reserve(1, 1, u+1, testBase, testBase).ReservationID] = true
		all[f.reserve(1, 2, u+1, testBase, testBase).ReservationID] = true
	}
	owners := []string{"A", "B", "C"}
	claimed := make([][]reservation.Snapshot, len(owners))
	var wg sync.WaitGroup
	for i, owner := range owners {
		wg.Go(func() {
			for empty := 0; empty < 3; {
				got, err := f.s.ClaimDue(ctx, testBase, 17, owner, time.Minute)
				if err != nil {
					t.Errorf("%s: %v", owner, err)
					return
				}
				if len(got) == 0 {
					empty++
				}
				claimed[i] = append(claimed[i], got...)
			}
		})
	}
	wg.Wait()
	owner := map[string]string{}
	for i, list := range claimed {
		for _, r := range list {
			if prev, dup := owner[r.ReservationID]; dup {
				t.Fatalf("%s claimed by %s and %s", r.ReservationID, prev, owners[i])
			}
			owner[r.ReservationID] = owners[i]
			if st := f.get(r); st.LeaseOwner != owners[i] || st.SendAttempt != 1 {
				t.Fatalf("%s: lease %q attempt %d, want %s and 1", r.ReservationID, st.LeaseOwner, st.SendAttempt, owners[i])
			}
		}
	}
	if len(owner) != len(all) {
		t.Fatalf("claimed %d distinct, want all %d", len(owner), len(all))
	}
}

func TestClaimDueAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 5)
	r := f.reserve(1, 1, 1, testBase, testBase)
	if got, _ := f.s.ClaimDue(ctx, testBase, 10, "A", 5*time.Second); len(got) != 1 {
		t.Fatalf("A claimed %d", len(got))
	}
	if got, _ := f.s.ClaimDue(ctx, testBase.Add(time.Second), 10, "B", 5*time.Second); len(got) != 0 {
		t.Fatalf("B claimed a leased reservation: %v", got)
	}
	// A crashed; the lease ends and B takes over.
	at := testBase.Add(6 * time.Second)
	got, err := f.s.ClaimDue(ctx, at, 10, "B", 5*time.Second)
	if err != nil || len(got) != 1 || got[0].ReservationID != r.ReservationID || got[0].SendAttempt != 2 {
		t.Fatalf("B after expiry: %+v, %v", got, err)
	}
	if st := f.get(r); st.LeaseOwner != "B" || !st.LeaseUntil.Equal(at.Add(5*time.Second)) {
		t.Fatalf("lease after takeover: %+v", st)
	}
	// A's late retry does not cut B's lease short.
	if err := f.s.ScheduleRetry(ctx, ref(r), "A", at); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.s.ClaimDue(ctx, at.Add(time.Second), 10, "C", time.Second); len(got) != 0 {
		t.Fatalf("C claimed during B's lease: %v", got)
	}
}

func TestClaimDueDropsStaleIndexEntries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	f.seed(1, 1, 5)
	sk := f.s.keys.slot(1, 1)
	r := f.reserve(1, 1, 1, testBase, testBase)
	// An index entry whose hash is gone, and one whose reservation moved
	// on without leaving the index (as after a partial write).
	f.c.ZAdd(ctx, sk.pending, goredisZ(ms(testBase), "rsv_gone"))
	if err := f.s.MarkSent(ctx, ref(r)); err != nil {
		t.Fatal(err)
	}
	f.c.ZAdd(ctx, sk.pending, goredisZ(ms(testBase), r.ReservationID))
	got, err := f.s.ClaimDue(ctx, testBase, 10, "A", time.Second)
	if err != nil || len(got) != 0 {
		t.Fatalf("ClaimDue = %v, %v", got, err)
	}
	if n := f.c.ZCard(ctx, sk.pending).Val(); n != 0 {
		t.Fatalf("pending has %d stale entries left", n)
	}
	_, err = f.s.ClaimDue(ctx, testBase, 10, "", time.Second)
	wantErr(t, err, reservation.ErrInvalid)
}

func TestClaimDueSeesSlotsSeededByAnotherInstance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, with(func(c *Config) { c.SlotsCacheTTL = time.Nanosecond }))
	ctx := ctxT(t)
	if got, err := f.s.ClaimDue(ctx, testBase, 10, "A", time.Second); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	// Another instance on the same namespace seeds and reserves.
	other, err := New(f.c, Config{Namespace: f.s.Namespace()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f2 := &fixture{t: t, s: other, c: f.c}
	f2.seed(3, 3, 1)
	f2.reserve(3, 3, 1, testBase, testBase)
	if got, err := f.s.ClaimDue(ctx, testBase, 10, "A", time.Second); err != nil || len(got) != 1 {
		t.Fatalf("after another instance seeded: %v, %v", got, err)
	}
}
