package redis

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// TestSetPausedRefusesEveryLaneOnceItReturns: while buyers reserve, a
// pause of the sale returns only once every lane refuses: each Reserve
// that starts after SetPaused returned is ErrActivityPaused, in every
// lane; what was accepted before stays (stock conserved); a resume sells
// again; SetEndsAt ends the sale in every lane at once and a later end
// reopens it; both are idempotent and need a seeded SKU.
func TestSetPausedRefusesEveryLaneOnceItReturns(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 3} {
		f := newFixture(t)
		s, ctx := f.s, ctxT(t)
		a := f.seedLanes(int64(10+lanes), 1, 300, lanes)

		var (
			paused  atomic.Bool
			wg      sync.WaitGroup
			mu      sync.Mutex
			bad     []error
			sold    atomic.Int64
			refused atomic.Int64
		)
		const buyers, perBuyer = 4, 40
		for b := range buyers {
			wg.Go(func() {
				for i := range perBuyer {
					after := paused.Load() // read before the call starts
					_, err := s.Reserve(ctx, f.newRsv(a.ActivityID, 1, int64(1+b*perBuyer+i), testBase), testBase)
					switch {
					case err == nil && after:
						mu.Lock()
						bad = append(bad, errors.New("a Reserve started after SetPaused returned was accepted"))
						mu.Unlock()
					case err == nil:
						sold.Add(1)
					case errors.Is(err, ports.ErrActivityPaused):
						refused.Add(1)
					default:
						mu.Lock()
						bad = append(bad, err)
						mu.Unlock()
					}
				}
			})
		}
		if err := s.SetPaused(ctx, a, true); err != nil {
			t.Fatalf("lanes %d: SetPaused: %v", lanes, err)
		}
		paused.Store(true)
		wg.Wait()
		if len(bad) > 0 {
			t.Fatalf("lanes %d: %d wrong answers, the first: %v", lanes, len(bad), bad[0])
		}
		for user := int64(1000); user < 1000+int64(3*lanes); user++ { // every lane
			_, err := s.Reserve(ctx, f.newRsv(a.ActivityID, 1, user, testBase), testBase)
			wantErr(t, err, ports.ErrActivityPaused)
		}
		for k := range lanes {
			if v := f.c.HGet(ctx, s.lane(a.ActivityID, 1, k, lanes).rules, "paused").Val(); v != "1" {
				t.Fatalf("lanes %d: lane %d paused = %q, want 1", lanes, k, v)
			}
		}
		if inv := f.inventory(a.ActivityID, 1); inv.Available+int64(len(inv.Held)) != 300 || int64(len(inv.Held)) != sold.Load() {
			t.Fatalf("lanes %d: inventory %d available, %d held; %d sold: stock not conserved", lanes, inv.Available, len(inv.Held), sold.Load())
		}
		if err := s.SetPaused(ctx, a, true); err != nil {
			t.Fatalf("lanes %d: SetPaused again: %v", lanes, err)
		}
		if err := s.SetPaused(ctx, a, false); err != nil {
			t.Fatalf("lanes %d: SetPaused false: %v", lanes, err)
		}
		for user := int64(2000); user < 2000+int64(lanes); user++ {
			f.reserve(a.ActivityID, 1, user, testBase, testBase)
		}

		if err := s.SetEndsAt(ctx, a, testBase); err != nil {
			t.Fatalf("lanes %d: SetEndsAt now: %v", lanes, err)
		}
		if err := s.SetEndsAt(ctx, a, testBase); err != nil {
			t.Fatalf("lanes %d: SetEndsAt again: %v", lanes, err)
		}
		for user := int64(3000); user < 3000+int64(3*lanes); user++ {
			_, err := s.Reserve(ctx, f.newRsv(a.ActivityID, 1, user, testBase), testBase)
			wantErr(t, err, ports.ErrActivityEnded)
		}
		if err := s.SetEndsAt(ctx, a, testBase.Add(time.Minute)); err != nil {
			t.Fatalf("lanes %d: SetEndsAt later: %v", lanes, err)
		}
		f.reserve(a.ActivityID, 1, 3000, testBase, testBase)

		unseeded := a
		unseeded.ActivityID = 99
		wantErr(t, s.SetPaused(ctx, unseeded, true), ports.ErrNotFound)
		wantErr(t, s.SetEndsAt(ctx, unseeded, testBase), ports.ErrNotFound)
		if n := f.c.Exists(ctx, s.lane(99, 1, 0, 1).rules).Val(); n != 0 {
			t.Fatalf("lanes %d: a switch of an unseeded SKU wrote its rules", lanes)
		}
	}
}

// TestRebuildKeepsThePause: the rebuild from PostgreSQL carries the
// operator's switch: a Redis that lost the SKU entirely is seeded paused,
// and one that kept older rules (restored from an older copy) takes
// PostgreSQL's pause and end, in every lane.
func TestRebuildKeepsThePause(t *testing.T) {
	t.Parallel()
	t.Run("lost entirely", func(t *testing.T) {
		t.Parallel()
		f, gen := guardedFixture(t)
		s, ctx := f.s, ctxT(t)
		act := ports.Activity{ActivityID: 7, SKUID: 1, Stock: 5, StartsAt: testBase.Add(-time.Hour), EndsAt: testBase.Add(time.Hour),
			PaymentTimeout: time.Minute, ReservationTTL: 30 * time.Second, Paused: true}
		if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: act, Base: 5}); err != nil {
			t.Fatalf("Rebuild: %v", err)
		}
		if _, err := s.FinishRecovery(ctx, gen); err != nil {
			t.Fatal(err)
		}
		_, err := s.Reserve(ctx, f.newRsv(7, 1, 1, testBase), testBase)
		wantErr(t, err, ports.ErrActivityPaused)
		if err := s.SetPaused(ctx, act, false); err != nil {
			t.Fatal(err)
		}
		f.reserve(7, 1, 1, testBase, testBase)
	})
	t.Run("kept rules on lanes", func(t *testing.T) {
		t.Parallel()
		f, a, r1, r2, r3 := threeLanesSold(t)
		ctx := ctxT(t)
		// The older copy of Redis knew no pause; PostgreSQL says paused.
		gen := f.comeBackAsAnotherProcess(t)
		s := f.s
		if _, err := s.InFlight(ctx, gen, a); err != nil {
			t.Fatal(err)
		}
		p := a
		p.Paused = true
		if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: p, Base: 12,
			InFlight: []string{r1.ReservationID, r2.ReservationID, r3.ReservationID}}); err != nil {
			t.Fatalf("Rebuild: %v", err)
		}
		if _, err := s.FinishRecovery(ctx, gen); err != nil {
			t.Fatal(err)
		}
		for user := int64(10); user < 19; user++ {
			_, err := s.Reserve(ctx, f.newRsv(1, 1, user, testBase), testBase)
			wantErr(t, err, ports.ErrActivityPaused)
		}

		// Now the older copy holds that pause, and PostgreSQL says the
		// sale was resumed and then closed at testBase.
		gen = f.comeBackAsAnotherProcess(t)
		s = f.s
		if _, err := s.InFlight(ctx, gen, a); err != nil {
			t.Fatal(err)
		}
		c := a
		c.EndsAt, c.ClosedAt = testBase, testBase
		if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: c, Base: 12,
			InFlight: []string{r1.ReservationID, r2.ReservationID, r3.ReservationID}}); err != nil {
			t.Fatalf("Rebuild: %v", err)
		}
		if _, err := s.FinishRecovery(ctx, gen); err != nil {
			t.Fatal(err)
		}
		for user := int64(10); user < 19; user++ {
			_, err := s.Reserve(ctx, f.newRsv(1, 1, user, testBase), testBase)
			wantErr(t, err, ports.ErrActivityEnded)
			_, err = s.Reserve(ctx, f.newRsv(1, 1, user, testBase.Add(-time.Millisecond)), testBase)
			if err != nil {
				t.Fatalf("user %d before the close: %v (the resume of PostgreSQL should hold)", user, err)
			}
		}
	})
}
