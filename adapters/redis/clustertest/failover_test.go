package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// TestPromotedReplicaFreezesOnlyItsMastersSKUs: on a private cluster of
// three masters each with a replica, the master B of some SKUs stops
// serving them and its replica takes over, either because B was killed
// (the cluster promotes the replica after the node timeout) or by a manual
// CLUSTER FAILOVER (the replica takes over in step with B, which becomes
// its replica). The promoted replica carries B's data, generation hash
// included, as far as replication got, under a run_id of its own, so the
// guard sees another process: B's SKUs answer ErrStockPaused (nothing is
// sold from books that may miss acknowledged writes) while the other
// masters' SKUs keep selling; the pending generation is the promoted
// replica's run_id; the reservations it still holds are the ones
// replicated before the failover; the rebuild from PostgreSQL's facts
// (here: no order yet) and FinishRecovery let B's SKUs sell again with an
// I6 drift of 0 on every SKU. A laned SKU with lane 0 on B is rebuilt as a
// whole (every lane frozen by the recovery's read, all rewritten).
func TestPromotedReplicaFreezesOnlyItsMastersSKUs(t *testing.T) {
	for _, manual := range []bool{false, true} {
		name := map[bool]string{false: "master killed", true: "manual CLUSTER FAILOVER"}[manual]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			promotedReplica(t, manual)
		})
	}
}

func promotedReplica(t *testing.T, manual bool) {
	const ns = "failovertest"
	pc := startPrivateClusterWithReplicas(t)
	s, cc, _ := guardedStore(t, pc, ns)
	ctx := ctxT(t)

	// A fresh cluster: every master is a new process, verified with
	// nothing to rebuild.
	for range 3 {
		gen, err := s.RecoveryPending(ctx)
		if err != nil || gen == "" {
			t.Fatalf("a fresh cluster: RecoveryPending = %q, %v; want one generation per master", gen, err)
		}
		if ok, err := s.FinishRecovery(ctx, gen); !ok || err != nil {
			t.Fatalf("FinishRecovery(%s) = %v, %v", gen, ok, err)
		}
	}
	if gen, err := s.RecoveryPending(ctx); gen != "" || err != nil {
		t.Fatalf("after verifying three masters: RecoveryPending = %q, %v", gen, err)
	}

	kB, kB2, kA, kC, b := skusOnMasters(t, pc, cc, ns)
	acts := map[int64]ports.Activity{kB: open(1, kB, 10), kB2: open(1, kB2, 10), kA: open(1, kA, 10), kC: open(1, kC, 10)}
	for _, a := range acts {
		if err := s.SeedActivity(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	rsv := func(k, user int64) reservation.Snapshot { return newRsv(t, 1, k, user, fmt.Sprintf("k%d", k)) }
	reserve := func(k, user int64) {
		t.Helper()
		if err := reserveSettled(t, s, rsv(k, user)); err != nil {
			t.Fatalf("reserve sku %d user %d: %v", k, user, err)
		}
	}
	for k := range acts {
		reserve(k, 1)
		reserve(k, 2)
	}
	// A laned SKU (activity 2) whose lane 0 is on B and lane 1 elsewhere.
	laned := open(2, lanedOnB(t, cc, ns, b), 12)
	laned.StockLanes = 3
	if err := s.SeedActivity(ctx, laned); err != nil {
		t.Fatal(err)
	}
	lanedRsv := func(user int64) reservation.Snapshot { return newRsv(t, 2, laned.SKUID, user, "laned") }
	var lanedHeld []string
	for user := int64(1); user <= 4; user++ {
		if err := reserveSettled(t, s, lanedRsv(user)); err != nil {
			t.Fatalf("reserve laned user %d: %v", user, err)
		}
		lanedHeld = append(lanedHeld, lanedRsv(user).ReservationID)
	}
	slices.Sort(lanedHeld)
	// Every write so far reached B's replica: WAIT is the only way to know
	// what a promoted replica holds (replication is asynchronous).
	if n, err := pc.client(b).Do(ctx, "WAIT", 1, 10_000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for B's replica: %d, %v", n, err)
	}
	r := pc.replica(b)
	before, promoted := runIDOf(t, b.Client()), runIDOf(t, r.Client())
	// The cluster client may hold connections to a replica (it reads the
	// topology from any node): none may be kept to be used unchecked
	// once the replica is promoted.
	_ = cc.ForEachSlave(ctx, func(ctx context.Context, c *goredis.Client) error { return c.Ping(ctx).Err() })
	if manual {
		if err := pc.client(r).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", r.Addr(), err)
		}
	} else {
		pc.kill(b)
	}
	pc.waitPromoted(r)

	// B's SKUs are frozen; the others sell.
	for _, k := range []int64{kB, kB2} {
		if err := reserveSettled(t, s, rsv(k, 5)); !errors.Is(err, ports.ErrStockPaused) {
			t.Fatalf("reserve sku %d on the promoted replica: %v, want ErrStockPaused", k, err)
		}
	}
	for _, k := range []int64{kA, kC} {
		reserve(k, 5)
	}
	gen, err := s.RecoveryPending(ctx)
	if err != nil || gen != promoted || gen == before {
		t.Fatalf("RecoveryPending = %q, %v; want the promoted replica's run_id %q (B was %q)", gen, err, promoted, before)
	}
	for _, k := range []int64{kA, kC} {
		if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: acts[k], Base: 10}); !errors.Is(err, ports.ErrStockPaused) {
			t.Fatalf("rebuild of sku %d on a healthy master: %v, want ErrStockPaused", k, err)
		}
	}
	// The replicated reservations are in flight; PostgreSQL knows no
	// order yet, so the books are the stock less them.
	for _, k := range []int64{kB, kB2} {
		ids := inFlightIDs(t, s, gen, acts[k])
		want := []string{rsv(k, 1).ReservationID, rsv(k, 2).ReservationID}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Fatalf("in flight on sku %d after the failover: %v, want the replicated %v", k, ids, want)
		}
		res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: acts[k], Base: 10, InFlight: ids})
		if err != nil || res != (ports.RebuildResult{Available: 8, InFlight: 2}) {
			t.Fatalf("rebuild sku %d = %+v, %v; want 8 available, 2 in flight", k, res, err)
		}
	}
	// The laned SKU: the recovery's read freezes every lane by the
	// generation, and the rebuild rewrites them all from the facts.
	ids := inFlightIDs(t, s, gen, laned)
	if !slices.Equal(ids, lanedHeld) {
		t.Fatalf("in flight on the laned SKU after the failover: %v, want the replicated %v", ids, lanedHeld)
	}
	if res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: laned, Base: 12, InFlight: ids}); err != nil ||
		res != (ports.RebuildResult{Available: 8, InFlight: 4}) {
		t.Fatalf("rebuild of the laned SKU = %+v, %v; want 8 available, 4 in flight", res, err)
	}
	if ok, err := s.FinishRecovery(ctx, gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	reserve(kB, 6)
	reserve(kB2, 6)
	if err := reserveSettled(t, s, lanedRsv(6)); err != nil {
		t.Fatalf("reserve the laned SKU after the rebuild: %v", err)
	}
	for k := range acts {
		if d := drift(t, s, acts[k], nil); d != 0 {
			t.Errorf("sku %d: I6 drift %d after the failover and rebuild, want 0", k, d)
		}
	}
	if d := drift(t, s, laned, nil); d != 0 {
		t.Errorf("laned SKU: I6 drift %d after the failover and rebuild, want 0", d)
	}
}

// inFlightIDs returns the sorted ids of the reservations Redis still holds
// in flight for activity SKU a under the pending generation gen (the
// recovery's read, which freezes every lane of a by gen).
func inFlightIDs(t *testing.T, s *redis.Store, gen string, a ports.Activity) []string {
	t.Helper()
	inflight, err := s.InFlight(ctxT(t), gen, a)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(inflight))
	for _, x := range inflight {
		ids = append(ids, x.ReservationID)
	}
	slices.Sort(ids)
	return ids
}
