package redis

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// change runs ChangeStock and fails the test on error.
func (f *fixture) change(a ports.Activity, requestID string, delta int64) ports.RedisStockChange {
	f.t.Helper()
	got, err := f.s.ChangeStock(ctxT(f.t), a, requestID, delta)
	if err != nil {
		f.t.Fatalf("ChangeStock(%s, %+d): %v", requestID, delta, err)
	}
	return got
}

// reserveUntilSoldOut reserves for users from, from+1, ... until the SKU is
// sold out (at most limit) and returns how many it reserved.
func (f *fixture) reserveUntilSoldOut(a ports.Activity, from, limit int64) int64 {
	f.t.Helper()
	for i := range limit {
		_, err := f.s.Reserve(ctxT(f.t), f.newRsv(a.ActivityID, a.SKUID, from+i, testBase), testBase)
		if err != nil {
			wantErr(f.t, err, ports.ErrSoldOut)
			return i
		}
	}
	return limit
}

// TestStockChangeAddsOnce: a restock of a sold-out SKU makes exactly its
// units reservable again, and the same request id sent again changes
// nothing more.
func TestStockChangeAddsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.seed(1, 1, 2)
	if n := f.reserveUntilSoldOut(a, 1, 10); n != 2 {
		t.Fatalf("reserved %d before the restock, want 2", n)
	}
	if got := f.change(a, "restock-1", 3); got != (ports.RedisStockChange{Fresh: true, Available: 3}) {
		t.Fatalf("first AddStock = %+v, want fresh, 3 available", got)
	}
	for range 2 {
		if got := f.change(a, "restock-1", 3); got != (ports.RedisStockChange{Available: 3}) {
			t.Fatalf("AddStock again = %+v, want not fresh, 3 available", got)
		}
	}
	if n := f.reserveUntilSoldOut(a, 100, 10); n != 3 {
		t.Fatalf("reserved %d after the restock, want 3", n)
	}
	if got := f.change(a, "restock-1", 3); got != (ports.RedisStockChange{Available: 0}) {
		t.Fatalf("AddStock after the sale = %+v, want not fresh, 0 available", got)
	}
}

// TestStockChangeRemovesOnlyUnreservedUnits: a removal of more units than
// are unreserved changes nothing and says how many could go; one within
// them applies once, and the stock never goes below zero.
func TestStockChangeRemovesOnlyUnreservedUnits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.seed(1, 1, 5)
	f.reserve(1, 1, 1, testBase, testBase)
	f.reserve(1, 1, 2, testBase, testBase)
	if got := f.change(a, "cut-1", -4); got != (ports.RedisStockChange{Refused: true, Available: 3}) {
		t.Fatalf("removing 4 of 3 unreserved = %+v, want refused with 3", got)
	}
	if inv := f.inventory(1, 1); inv.Available != 3 || len(inv.Held) != 2 {
		t.Fatalf("after the refused removal: %+v, want 3 available, 2 held", inv)
	}
	if got := f.change(a, "cut-2", -3); got != (ports.RedisStockChange{Fresh: true, Available: 0}) {
		t.Fatalf("removing 3 = %+v, want fresh, 0 available", got)
	}
	if got := f.change(a, "cut-2", -3); got != (ports.RedisStockChange{}) {
		t.Fatalf("removing 3 again = %+v, want not fresh, 0 available", got)
	}
	if got := f.change(a, "cut-3", -1); !got.Refused || got.Available != 0 {
		t.Fatalf("removing from an empty counter = %+v, want refused with 0", got)
	}
	if inv := f.inventory(1, 1); inv.Available != 0 {
		t.Fatalf("available = %d, want 0", inv.Available)
	}
	_, err := f.s.ChangeStock(ctxT(t), ports.Activity{ActivityID: 9, SKUID: 9, Stock: 1}, "unknown", 1)
	wantErr(t, err, ports.ErrNotFound)
}

// TestStockChangeLaneShares: every lane gets its share of a restock, a
// retry changes no lane, a removal takes what the lanes hold in lane order
// (after transfers in transit arrive) and a removal beyond every lane's
// units gives back what it took.
func TestStockChangeLaneShares(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.seedLanes(1, 1, 10, 4) // [3 3 2 2]
	if got := f.change(a, "add-6", 6); !got.Fresh || got.Available != 16 {
		t.Fatalf("adding 6 = %+v, want fresh, 16 available", got)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{5, 5, 3, 3}) {
		t.Fatalf("lanes after adding 6 = %v, want [5 5 3 3]", got)
	}
	if got := f.change(a, "add-6", 6); got.Fresh || got.Available != 16 {
		t.Fatalf("adding 6 again = %+v, want not fresh, 16 available", got)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{5, 5, 3, 3}) {
		t.Fatalf("lanes after the retry = %v, want [5 5 3 3]", got)
	}
	if got := f.change(a, "cut-17", -17); !got.Refused || got.Available != 16 {
		t.Fatalf("removing 17 of 16 = %+v, want refused with 16", got)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{5, 5, 3, 3}) {
		t.Fatalf("lanes after the refused removal = %v, want [5 5 3 3]", got)
	}
	if got := f.change(a, "cut-7", -7); !got.Fresh || got.Available != 9 {
		t.Fatalf("removing 7 = %+v, want fresh, 9 available", got)
	}
	if got := f.laneStocks(a); !slices.Equal(got, []int64{0, 3, 3, 3}) {
		t.Fatalf("lanes after removing 7 = %v, want [0 3 3 3]", got)
	}
	if got := f.change(a, "cut-7", -7); got.Fresh || got.Available != 9 {
		t.Fatalf("removing 7 again = %+v, want not fresh, 9 available", got)
	}
	if n := f.reserveUntilSoldOut(a, 1, 20); n != 9 {
		t.Fatalf("reserved %d after the changes, want 9", n)
	}
}

// TestStockChangeAcrossARebuild: a change applied to books that a rebuild
// from PostgreSQL then replaced (PostgreSQL had not recorded it) applies
// exactly once more in the rebuilt books; while the books are frozen it
// changes nothing.
func TestStockChangeAcrossARebuild(t *testing.T) {
	t.Parallel()
	f, gen := guardedFixture(t)
	ctx := ctxT(t)
	if ok, err := f.s.FinishRecovery(ctx, gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	a := f.seed(1, 1, 4)
	if got := f.change(a, "restock", 2); !got.Fresh || got.Available != 6 {
		t.Fatalf("restock = %+v, want fresh, 6 available", got)
	}
	gen = f.comeBackAsAnotherProcess(t)
	_, err := f.s.ChangeStock(ctx, a, "restock", 2)
	wantErr(t, err, ports.ErrStockPaused)
	_, err = f.s.ChangeStock(ctx, a, "other", 1)
	wantErr(t, err, ports.ErrStockPaused)
	if _, err := f.s.InFlight(ctx, gen, a); err != nil {
		t.Fatal(err)
	}
	// PostgreSQL still has the restock PENDING: the base is the old stock.
	if res, err := f.s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: a, Base: 4}); err != nil || res.Available != 4 {
		t.Fatalf("Rebuild = %+v, %v; want 4 available", res, err)
	}
	if got := f.change(a, "restock", 2); !got.Fresh || got.Available != 6 {
		t.Fatalf("restock after the rebuild = %+v, want fresh again, 6 available", got)
	}
	if got := f.change(a, "restock", 2); got.Fresh || got.Available != 6 {
		t.Fatalf("restock again = %+v, want not fresh, 6 available", got)
	}
	if inv := f.inventory(1, 1); inv.Available != 6 {
		t.Fatalf("available = %d, want 6", inv.Available)
	}
}

// TestStockChangeOnTheClusterWithThreeLanes: on Redis Cluster, a SKU
// whose lanes live on different masters gets every lane's share once and
// loses only unreserved units.
func TestStockChangeOnTheClusterWithThreeLanes(t *testing.T) {
	t.Parallel()
	c, ns := redistest.NewCluster(t)
	s, err := New(c, Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	a := ports.Activity{ActivityID: 3, SKUID: 1, Stock: 6, StartsAt: testBase.Add(-3600e9), EndsAt: testBase.Add(3600e9),
		PaymentTimeout: 60e9, ReservationTTL: 30e9, StockLanes: 3}
	if err := s.SeedActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	lanes := func() []int64 {
		out := make([]int64, 3)
		for k := range out {
			v, err := c.Get(ctx, s.lane(3, 1, k, 3).stock).Int64()
			if err != nil {
				t.Fatalf("lane %d: %v", k, err)
			}
			out[k] = v
		}
		return out
	}
	for i := range 2 {
		got, err := s.ChangeStock(ctx, a, "add-4", 4)
		if err != nil || got.Fresh != (i == 0) || got.Available != 10 {
			t.Fatalf("adding 4 (call %d) = %+v, %v; want 10 available, fresh only the first time", i+1, got, err)
		}
	}
	if got := lanes(); !slices.Equal(got, []int64{4, 3, 3}) {
		t.Fatalf("lanes after adding 4 = %v, want [4 3 3]", got)
	}
	for user := int64(1); user <= 4; user++ { // users 1..4: lanes 1, 2, 0, 1
		if _, err := s.Reserve(ctx, f0Rsv(t, 3, 1, user), testBase); err != nil {
			t.Fatalf("Reserve user %d: %v", user, err)
		}
	}
	if got, err := s.ChangeStock(ctx, a, "cut-7", -7); err != nil || !got.Refused || got.Available != 6 {
		t.Fatalf("removing 7 of 6 unreserved = %+v, %v; want refused with 6", got, err)
	}
	if got := lanes(); !slices.Equal(got, []int64{3, 1, 2}) {
		t.Fatalf("lanes after the refused removal = %v, want [3 1 2]", got)
	}
	for i := range 2 {
		got, err := s.ChangeStock(ctx, a, "cut-5", -5)
		if err != nil || got.Refused || got.Fresh != (i == 0) || got.Available != 1 {
			t.Fatalf("removing 5 (call %d) = %+v, %v; want 1 available, fresh only the first time", i+1, got, err)
		}
	}
	if inv, err := s.Inventory(ctx, 3, 1); err != nil || inv.Available != 1 || len(inv.Held) != 4 {
		t.Fatalf("Inventory = %+v, %v; want 1 available, 4 held", inv, err)
	}
}

// f0Rsv is a new reservation of user created at testBase, for a Store
// without a fixture.
func f0Rsv(t *testing.T, activityID, skuID, user int64) reservation.Snapshot {
	t.Helper()
	f := &fixture{t: t}
	f.seq.Store(user * 1000)
	return f.newRsv(activityID, skuID, user, testBase)
}
