package redis

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// seedLanes creates an activity SKU open from base-1h to base+1h whose
// stock is split over lanes lanes.
func (f *fixture) seedLanes(activityID, skuID, stock int64, lanes int) ports.Activity {
	f.t.Helper()
	a := ports.Activity{
		ActivityID: activityID, SKUID: skuID, Stock: stock,
		StartsAt: testBase.Add(-time.Hour), EndsAt: testBase.Add(time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: 30 * time.Second, StockLanes: lanes,
	}
	if err := f.s.SeedActivity(ctxT(f.t), a); err != nil {
		f.t.Fatalf("SeedActivity: %v", err)
	}
	return a
}

// laneStocks reads every lane's counter.
func (f *fixture) laneStocks(a ports.Activity) []int64 {
	f.t.Helper()
	out := make([]int64, a.Lanes())
	for k := range out {
		v, err := f.c.Get(ctxT(f.t), f.s.lane(a.ActivityID, a.SKUID, k, a.Lanes()).stock).Int64()
		if err != nil {
			f.t.Fatalf("lane %d stock: %v", k, err)
		}
		out[k] = v
	}
	return out
}

// TestLanesSellEveryUnitToTheBuyersOfOneLane: the stock is seeded in equal
// shares; buyers who all map to one lane still buy every unit (the empty
// lane is refilled from the others), the next one is sold out, one unit
// per buyer holds, and a unit given back in one lane is bought by a buyer
// of another.
func TestLanesSellEveryUnitToTheBuyersOfOneLane(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	a := f.seedLanes(1, 1, 10, 4)
	if got := f.laneStocks(a); !slices.Equal(got, []int64{3, 3, 2, 2}) {
		t.Fatalf("seeded lanes = %v, want [3 3 2 2]", got)
	}
	other := a
	other.StockLanes = 2
	wantErr(t, f.s.SeedActivity(ctx, other), ports.ErrAlreadyExists)
	if err := f.s.SeedActivity(ctx, a); err != nil {
		t.Fatalf("seeding again: %v", err)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{3, 3, 2, 2}) {
		t.Fatalf("lanes after seeding again = %v, want [3 3 2 2]", got)
	}
	var sold []string
	for i := int64(1); i <= 10; i++ {
		r := f.reserve(1, 1, 4*i, testBase, testBase) // users 4, 8, ...: lane 0
		sold = append(sold, r.ReservationID)
	}
	_, err := f.s.Reserve(ctx, f.newRsv(1, 1, 44, testBase), testBase)
	wantErr(t, err, ports.ErrSoldOut)
	_, err = f.s.Reserve(ctx, f.newRsv(1, 1, 8, testBase), testBase)
	wantErr(t, err, ports.ErrAlreadyPurchased) // user 8 holds a unit of lane 0
	if got := f.laneStocks(a); !slices.Equal(got, []int64{0, 0, 0, 0}) {
		t.Fatalf("lanes after the sale = %v, want all 0", got)
	}
	inv := f.inventory(1, 1)
	slices.Sort(inv.Held)
	slices.Sort(sold)
	if inv.Available != 0 || !slices.Equal(inv.Held, sold) {
		t.Fatalf("Inventory = %+v, want 0 available and the 10 sold held", inv)
	}
	for k := range 4 {
		if n := f.c.HLen(ctx, f.s.lane(1, 1, k, 4).transfers).Val(); n != 0 {
			t.Fatalf("lane %d transfer log holds %d entries after the sale", k, n)
		}
	}

	// A release through a ref without the user finds the lane; the unit
	// goes back to lane 0 and a buyer of lane 1 takes it.
	released, err := f.s.Release(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: sold[0]}, "ORDER_CANCELED")
	if err != nil || !released {
		t.Fatalf("Release = %v, %v", released, err)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{1, 0, 0, 0}) {
		t.Fatalf("lanes after a release = %v, want [1 0 0 0]", got)
	}
	r := f.reserve(1, 1, 5, testBase, testBase) // lane 1
	if got := f.get(r); got.Status != "PENDING" {
		t.Fatalf("reservation of user 5: %s", got.Status)
	}
	if inv := f.inventory(1, 1); inv.Available != 0 || len(inv.Held) != 10 {
		t.Fatalf("Inventory = %d available, %d held; want 0 and 10", inv.Available, len(inv.Held))
	}
	st, err := f.s.BuyerState(ctx, 5, "none", 1, 1)
	if err != nil || !st.HoldsUnit {
		t.Fatalf("BuyerState of user 5 = %+v, %v; want holding", st, err)
	}
}

// TestLanesNeverOversellUnderConcurrentBuyers: many buyers of every lane
// at once sell exactly the stock, each buyer at most once, and the lanes
// end empty with nothing in transit.
func TestLanesNeverOversellUnderConcurrentBuyers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	a := f.seedLanes(1, 1, 50, 4)
	const buyers = 200
	var (
		mu   sync.Mutex
		won  = map[int64]int{}
		errs []error
		wg   sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for u := int64(w); u < buyers; u += 8 {
				// Every buyer tries twice, some buyers come from two
				// workers, and every buyer maps to lane 0 or 1: lanes 2
				// and 3 sell only through transfers.
				user := u/3*4 + u%2
				for range 2 {
					_, err := f.s.Reserve(ctx, f.newRsv(1, 1, user+1, testBase), testBase)
					mu.Lock()
					switch {
					case err == nil:
						won[user+1]++
					case !errors.Is(err, ports.ErrSoldOut) && !errors.Is(err, ports.ErrAlreadyPurchased):
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("unexpected Reserve errors: %v", errs[0])
	}
	total := 0
	for u, n := range won {
		if n != 1 {
			t.Fatalf("user %d reserved %d units", u, n)
		}
		total++
	}
	inv := f.inventory(1, 1)
	if total != 50 || inv.Available != 0 || len(inv.Held) != 50 {
		t.Fatalf("sold %d, Inventory %d available %d held; want 50, 0, 50", total, inv.Available, len(inv.Held))
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{0, 0, 0, 0}) {
		t.Fatalf("lanes after the sale = %v", got)
	}
}

// TestLaneTransferInterruptedIsCountedAndFinished: a transfer whose taker
// stopped after the units left the giving lane keeps them counted as
// available (stock conservation), and the next buyer who finds every lane
// empty finishes it and buys them.
func TestLaneTransferInterruptedIsCountedAndFinished(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	a := f.seedLanes(1, 1, 4, 2)
	src := f.s.lane(1, 1, 1, 2)
	// Lane 1 gives its 2 units to lane 0 and the process stops there.
	got, err := f.s.run(ctx, scriptTransferOut, []string{src.rules, src.stock, src.transfers},
		"t-crashed", "0", "2", strconv.FormatInt(testBase.UnixMilli(), 10)).Slice()
	if err != nil || len(got) != 2 || got[0] != int64(2) {
		t.Fatalf("transfer_out = %v, %v", got, err)
	}
	if st := f.laneStocks(a); !slices.Equal(st, []int64{2, 0}) {
		t.Fatalf("lanes = %v, want [2 0] with 2 in transit", st)
	}
	if inv := f.inventory(1, 1); inv.Available != 4 {
		t.Fatalf("Inventory available = %d, want 4 (2 in lane 0, 2 in transit)", inv.Available)
	}
	for _, user := range []int64{1, 3, 5, 7} { // lane 1
		f.reserve(1, 1, user, testBase, testBase)
	}
	_, err = f.s.Reserve(ctx, f.newRsv(1, 1, 9, testBase), testBase)
	wantErr(t, err, ports.ErrSoldOut)
	if inv := f.inventory(1, 1); inv.Available != 0 || len(inv.Held) != 4 {
		t.Fatalf("Inventory = %d available, %d held; want 0 and 4", inv.Available, len(inv.Held))
	}
	if n := f.c.HLen(ctx, src.transfers).Val(); n != 0 {
		t.Fatalf("transfer log holds %d entries, want the interrupted one finished", n)
	}
	// Finishing it again adds nothing.
	dst := f.s.lane(1, 1, 0, 2)
	if code, err := f.s.run(ctx, scriptTransferIn, []string{dst.rules, dst.stock, dst.received}, "t-crashed", "2", "").Int64(); err != nil || code != 0 {
		t.Fatalf("transfer_in again = %d, %v; want 0 (received already)", code, err)
	}
}

// threeLanesSold is a guarded fixture with a verified generation and an
// activity SKU of 12 units in 3 lanes, where users 1, 2 and 3 reserved one
// unit each (lanes 1, 2 and 0).
func threeLanesSold(t *testing.T) (f *fixture, a ports.Activity, r1, r2, r3 reservation.Snapshot) {
	t.Helper()
	f, gen := guardedFixture(t)
	if ok, err := f.s.FinishRecovery(ctxT(t), gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	a = f.seedLanes(1, 1, 12, 3)
	r1 = f.reserve(1, 1, 1, testBase, testBase)
	r2 = f.reserve(1, 1, 2, testBase, testBase)
	r3 = f.reserve(1, 1, 3, testBase, testBase)
	return f, a, r1, r2, r3
}

// TestLanesRebuiltTogether: after a new Redis process, the recovery's
// InFlight freezes every lane, the rebuild splits what PostgreSQL leaves
// over the lanes (each keeps the units its in-flight reservations hold),
// drops transfers logged before it, and opens every lane.
func TestLanesRebuiltTogether(t *testing.T) {
	t.Parallel()
	f, a, r1, r2, r3 := threeLanesSold(t) // r3 becomes an order
	s, ctx := f.s, ctxT(t)
	src := s.lane(1, 1, 2, 3)
	if _, err := s.run(ctx, scriptTransferOut, []string{src.rules, src.stock, src.transfers},
		"t-old", "0", "1", strconv.FormatInt(testBase.UnixMilli(), 10)).Slice(); err != nil {
		t.Fatal(err)
	}

	// Redis comes back as another process: only lane 0's master would
	// freeze on a cluster; here the guard freezes the lanes it finds.
	f.c.HDel(ctx, s.lane(1, 1, 1, 3).rules, "frozen")
	gen := f.comeBackAsAnotherProcess(t)
	s = f.s
	inflight, err := s.InFlight(ctx, gen, a)
	if err != nil || len(inflight) != 3 {
		t.Fatalf("InFlight = %d, %v; want 3", len(inflight), err)
	}
	for k := range 3 {
		if v := f.c.HGet(ctx, s.lane(1, 1, k, 3).rules, "frozen").Val(); v != gen {
			t.Fatalf("lane %d frozen = %q, want %q", k, v, gen)
		}
	}
	// PostgreSQL: r3 is an order (12 - 1 left), r1 and r2 undecided.
	res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: a, Base: 11,
		InFlight: []string{r1.ReservationID, r2.ReservationID}, Ordered: []string{r3.ReservationID},
		Holders: []ports.Holder{{UserID: 3, ReservationID: r3.ReservationID}}})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if res != (ports.RebuildResult{Available: 9, InFlight: 2}) {
		t.Fatalf("Rebuild = %+v, want 9 available, 2 in flight", res)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{3, 3, 3}) {
		t.Fatalf("lanes after rebuild = %v, want [3 3 3]", got)
	}
	for k := range 3 {
		if v := f.c.HGet(ctx, s.lane(1, 1, k, 3).rules, "frozen").Val(); v != "" {
			t.Fatalf("lane %d still frozen by %q", k, v)
		}
	}
	dst := s.lane(1, 1, 0, 3)
	if code, err := s.run(ctx, scriptTransferIn, []string{dst.rules, dst.stock, dst.received}, "t-old", "1", "").Int64(); err != nil || code != -2 {
		t.Fatalf("transfer_in of a transfer logged before the rebuild = %d, %v; want -2 (dropped)", code, err)
	}
	if inv := f.inventory(1, 1); inv.Available != 9 || len(inv.Held) != 3 {
		t.Fatalf("Inventory = %d available, %d held; want 9 and 3", inv.Available, len(inv.Held))
	}
	_, err = s.Reserve(ctx, f.newRsv(1, 1, 3, testBase), testBase)
	wantErr(t, err, ports.ErrAlreadyPurchased)
	f.reserve(1, 1, 4, testBase, testBase)
}

// TestLanesRebuildSeedsALostLane: a lane whose keys are all gone (its
// master came back empty) makes the SKU's recovery freeze the other lanes,
// and the rebuild seeds the lost lane again with its share; the unit of a
// reservation only the lost lane knew comes back.
func TestLanesRebuildSeedsALostLane(t *testing.T) {
	t.Parallel()
	// r1 stays in flight, r2 is lost with its lane (never sent), r3
	// became an order.
	f, a, r1, _, r3 := threeLanesSold(t)
	s, ctx := f.s, ctxT(t)
	lost := s.lane(1, 1, 2, 3)
	keys, err := f.c.Keys(ctx, s.keys.ns+":{"+s.laneID(1, 1, 2, 3)+"}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("lane 2 keys: %v, %v", keys, err)
	}
	f.c.Del(ctx, keys...)
	if n := f.c.Exists(ctx, lost.rules, lost.stock).Val(); n != 0 {
		t.Fatalf("lane 2 still has %d keys", n)
	}
	gen := f.comeBackAsAnotherProcess(t)
	s = f.s
	inflight, err := s.InFlight(ctx, gen, a)
	if err != nil || len(inflight) != 2 {
		t.Fatalf("InFlight = %d, %v; want r1 and r3", len(inflight), err)
	}
	res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: a, Base: 11,
		InFlight: []string{r1.ReservationID}, Ordered: []string{r3.ReservationID},
		Holders: []ports.Holder{{UserID: 3, ReservationID: r3.ReservationID}}})
	if err != nil || res != (ports.RebuildResult{Available: 10, InFlight: 1}) {
		t.Fatalf("Rebuild = %+v, %v; want 10 available, 1 in flight", res, err)
	}
	if got := f.laneStocks(a); got[0]+got[1]+got[2] != 10 || got[2] == 0 {
		t.Fatalf("lanes after rebuild = %v, want 10 in all and lane 2 seeded again", got)
	}
	if v := f.c.HGet(ctx, lost.rules, "lanes").Val(); v != "3" {
		t.Fatalf("lane 2 rules lanes = %q, want 3", v)
	}
	if inv := f.inventory(1, 1); inv.Available != 10 || len(inv.Held) != 2 {
		t.Fatalf("Inventory = %d available, %d held; want 10 and 2", inv.Available, len(inv.Held))
	}
	f.reserve(1, 1, 2, testBase, testBase) // user 2's lost reservation holds nothing now
	f.reserve(1, 1, 5, testBase, testBase)
}
