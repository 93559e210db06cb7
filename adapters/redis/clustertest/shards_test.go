package clustertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// TestReadsAcrossShards seeds activity SKUs until their hash slots cover
// every master, reserves one unit of each, and requires the reads that
// span activity SKUs (ClaimDue, Stats, Unresolved), the batches that span
// them (MarkSentBatch, ReleaseMany) and the order views (one hash slot per
// order) to see every master's data.
func TestReadsAcrossShards(t *testing.T) {
	s, c, ns := newStore(t)
	ctx := ctxT(t)
	all := masters(t, c)
	covered := map[string]bool{}
	var skus []int64
	// 64 SKUs cover three masters unless the hash is badly skewed; the test
	// fails then rather than loop.
	for k := int64(1); k <= 64 && len(covered) < len(all); k++ {
		if err := s.SeedActivity(ctx, open(1, k, 10)); err != nil {
			t.Fatal(err)
		}
		skus = append(skus, k)
		covered[owner(t, c, keySlot(t, c, skuKey(ns, 1, k)))] = true
	}
	if len(covered) < len(all) {
		t.Fatalf("%d SKUs cover %d of %d masters", len(skus), len(covered), len(all))
	}
	var refs []ports.ReservationRef
	for i, k := range skus {
		r := newRsv(t, 1, k, int64(100+i), fmt.Sprintf("shard%d", k))
		if _, err := s.Reserve(ctx, r, r.CreatedAt); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ports.ReservationRef{ActivityID: 1, SKUID: k, ReservationID: r.ReservationID})
		v := ports.OrderView{OrderID: r.OrderID, ReservationID: r.ReservationID, ActivityID: 1, SKUID: k,
			UserID: r.UserID, Status: "CREATED", AggregateVersion: 1, CreatedAt: r.CreatedAt}
		if ok, err := s.OrderViews().Apply(ctx, v); err != nil || !ok {
			t.Fatalf("apply view %s: %v %v", r.OrderID, ok, err)
		}
		if got, err := s.OrderViews().Get(ctx, r.OrderID); err != nil || got.SKUID != k {
			t.Fatalf("view %s: %+v %v", r.OrderID, got, err)
		}
	}
	n := int64(len(skus))

	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unresolved != n || st.PendingSend != n {
		t.Errorf("Stats = %+v, want %d unresolved and pending", st, n)
	}
	later := time.Now().Add(time.Hour)
	un, err := s.Unresolved(ctx, later, 1000)
	if err != nil || int64(len(un)) != n {
		t.Errorf("Unresolved: %d reservations, %v; want %d", len(un), err, n)
	}
	claimed, err := s.ClaimDue(ctx, later, 1000, "scanner", time.Minute)
	if err != nil || int64(len(claimed)) != n {
		t.Errorf("ClaimDue: %d reservations, %v; want %d", len(claimed), err, n)
	}

	if err := s.MarkSentBatch(ctx, refs); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Stats(ctx); err != nil || st.PendingSend != 0 || st.Unresolved != n {
		t.Errorf("after MarkSentBatch Stats = %+v, %v", st, err)
	}
	reqs := make([]ports.ReleaseRequest, len(refs))
	for i, r := range refs {
		reqs[i] = ports.ReleaseRequest{Ref: r, Reason: reservation.ReasonOrderCanceled}
	}
	for i, res := range s.ReleaseMany(ctx, reqs) {
		if res.Err != nil || !res.Released {
			t.Errorf("release %s: %+v", refs[i].ReservationID, res)
		}
	}
	for _, k := range skus {
		inv, err := s.Inventory(ctx, 1, k)
		if err != nil || inv.Available != 10 || len(inv.Held) != 0 {
			t.Errorf("SKU %d after release: %+v %v", k, inv, err)
		}
	}
	if st, err = s.Stats(ctx); err != nil || st.Unresolved != 0 {
		t.Errorf("after ReleaseMany Stats = %+v, %v", st, err)
	}
}
