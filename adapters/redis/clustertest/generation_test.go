package clustertest

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// guardedStore returns a Store on a cluster client of pc whose connections
// run the per-master guard (redis.NewClient with a Guard), in namespace ns.
func guardedStore(t *testing.T, pc *privateCluster, ns string) (*redis.Store, *goredis.ClusterClient, *redis.Guard) {
	t.Helper()
	g, err := redis.NewGuard(ns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	uc, err := redis.NewClient(pc.addrs(), redis.ClientOptions{Cluster: true, Guard: g})
	if err != nil {
		t.Fatalf("NewClient with a guard on a cluster: %v", err)
	}
	t.Cleanup(func() { _ = uc.Close() })
	cc, ok := uc.(*goredis.ClusterClient)
	if !ok {
		t.Fatalf("NewClient returned %T, not a cluster client", uc)
	}
	s, err := redis.New(cc, redis.Config{Namespace: ns, Guard: g}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s, cc, g
}

// reserveSettled reserves r, calling again while the answer is a failure
// of the connection (the first command after a master restarted may meet a
// pooled connection of the dead process): it returns the first business
// answer.
func reserveSettled(t *testing.T, s *redis.Store, r reservation.Snapshot) error {
	t.Helper()
	ctx := ctxT(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := s.Reserve(ctx, r, r.CreatedAt)
		if err == nil || errors.Is(err, ports.ErrStockPaused) || errors.Is(err, ports.ErrActivityNotFound) ||
			errors.Is(err, ports.ErrSoldOut) || errors.Is(err, ports.ErrAlreadyPurchased) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drift is the I6 drift of activity SKU a/k after a rebuild: initial stock
// minus Redis' available units, minus the in-flight reservations (the
// holders that are not orders), minus PostgreSQL's orders (the reservation
// ids in orders).
func drift(t *testing.T, s *redis.Store, a ports.Activity, orders []string) int64 {
	t.Helper()
	inv, err := s.Inventory(ctxT(t), a.ActivityID, a.SKUID)
	if err != nil {
		t.Fatalf("inventory %d/%d: %v", a.ActivityID, a.SKUID, err)
	}
	inFlight := int64(0)
	for _, id := range inv.Held {
		if !slices.Contains(orders, id) {
			inFlight++
		}
	}
	return a.Stock - inv.Available - inFlight - int64(len(orders))
}

// TestRestartedClusterMasterFreezesOnlyItsSKUs replaces one master of a
// private three-master cluster by a new process, started on an older copy
// of its AOF (the acknowledged reservations of the last moments, and an
// activity SKU seeded since, are gone) or on no data at all, and requires:
// the SKUs that master serves answer ErrStockPaused (the SKU it lost
// entirely too, not ErrActivityNotFound) while the other masters' SKUs keep
// selling; the pending generation is that master's new run_id; a rebuild
// for it refuses the other masters' SKUs (they were never frozen) and
// rebuilds its own from PostgreSQL's facts; after it the I6 drift of every
// SKU is 0 and a new connection to the verified process freezes nothing.
func TestRestartedClusterMasterFreezesOnlyItsSKUs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older bool
	}{{"restored older AOF", true}, {"restarted empty", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			restartedMaster(t, tc.older)
		})
	}
}

func restartedMaster(t *testing.T, older bool) {
	const ns = "guardtest"
	pc := startPrivateCluster(t)
	s, cc, _ := guardedStore(t, pc, ns)
	ctx := ctxT(t)

	// A fresh cluster: every master is a new process, verified with
	// nothing to rebuild.
	var verified []string
	for range 10 {
		gen, err := s.RecoveryPending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if gen == "" {
			break
		}
		if ok, err := s.FinishRecovery(ctx, gen); !ok || err != nil {
			t.Fatalf("FinishRecovery(%s) = %v, %v", gen, ok, err)
		}
		verified = append(verified, gen)
	}
	if len(verified) != 3 {
		t.Fatalf("a fresh cluster had %d pending generations (%v), want one per master", len(verified), verified)
	}

	kB, lostB, kA, kC, b := skusOnMasters(t, pc, cc, ns)
	acts := map[int64]ports.Activity{kB: open(1, kB, 10), kA: open(1, kA, 10), kC: open(1, kC, 10)}
	for _, k := range []int64{kB, kA, kC} {
		if err := s.SeedActivity(ctx, acts[k]); err != nil {
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
	for _, k := range []int64{kB, kA, kC} {
		reserve(k, 1)
		reserve(k, 2)
	}
	backup := ""
	if older {
		backup = pc.copyAOF(b)
	}
	// Acknowledged after the copy: lost by the restore.
	acts[lostB] = open(1, lostB, 5)
	if err := s.SeedActivity(ctx, acts[lostB]); err != nil {
		t.Fatal(err)
	}
	reserve(lostB, 7)
	for _, k := range []int64{kB, kA, kC} {
		reserve(k, 3)
		reserve(k, 4)
	}
	before := runIDOf(t, b.Client())

	pc.restart(b, backup)
	after := runIDOf(t, b.Client())
	if after == before {
		t.Fatalf("master B kept run_id %s across a restart", after)
	}

	// B's SKUs are frozen, the one it lost entirely too; the others sell.
	for _, k := range []int64{kB, lostB} {
		if err := reserveSettled(t, s, rsv(k, 5)); !errors.Is(err, ports.ErrStockPaused) {
			t.Fatalf("reserve sku %d on the restarted master: %v, want ErrStockPaused", k, err)
		}
	}
	for _, k := range []int64{kA, kC} {
		reserve(k, 5)
	}
	gen, err := s.RecoveryPending(ctx)
	if err != nil || gen != after {
		t.Fatalf("RecoveryPending = %q, %v; want master B's new run_id %q", gen, err, after)
	}

	// The recovery of B's generation: the other masters' SKUs were never
	// frozen, so their rebuild is refused (the worker skips them).
	for _, k := range []int64{kA, kC} {
		_, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: acts[k], Base: 10})
		if !errors.Is(err, ports.ErrStockPaused) {
			t.Fatalf("rebuild of sku %d on a healthy master: %v, want ErrStockPaused", k, err)
		}
	}
	// PostgreSQL: user 3's reservation of kB became an order (its message
	// was in the broker), user 4's never reached the broker (lost with
	// Redis), the reservations B still has are undecided; lostB's only
	// reservation became an order.
	ids := inFlightIDs(t, s, gen, acts[kB])
	want := []string{}
	if older {
		want = []string{rsv(kB, 1).ReservationID, rsv(kB, 2).ReservationID}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("in flight on B after the restart: %v, want %v", ids, want)
	}
	r3 := rsv(kB, 3)
	res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: acts[kB], Base: 10 - 1,
		InFlight: ids, Holders: []ports.Holder{{UserID: 3, ReservationID: r3.ReservationID}}})
	if err != nil {
		t.Fatalf("rebuild sku %d: %v", kB, err)
	}
	if want := (ports.RebuildResult{Available: 9 - int64(len(ids)), InFlight: int64(len(ids))}); res != want {
		t.Fatalf("rebuild sku %d = %+v, want %+v", kB, res, want)
	}
	r7 := rsv(lostB, 7)
	res, err = s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: acts[lostB], Base: 5 - 1,
		Holders: []ports.Holder{{UserID: 7, ReservationID: r7.ReservationID}}})
	if err != nil || res != (ports.RebuildResult{Available: 4}) {
		t.Fatalf("rebuild of the lost sku %d = %+v, %v; want 4 available", lostB, res, err)
	}
	if ok, err := s.FinishRecovery(ctx, gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	if g, err := s.RecoveryPending(ctx); g != "" || err != nil {
		t.Fatalf("RecoveryPending after the recovery = %q, %v", g, err)
	}

	// Selling again, with the holders PostgreSQL knows.
	reserve(kB, 6)
	reserve(lostB, 6)
	for _, c := range []struct{ k, user int64 }{{kB, 3}, {lostB, 7}} {
		if err := reserveSettled(t, s, rsv(c.k, c.user)); !errors.Is(err, ports.ErrAlreadyPurchased) {
			t.Fatalf("reserve sku %d user %d after the rebuild: %v, want ErrAlreadyPurchased", c.k, c.user, err)
		}
	}
	for k, orders := range map[int64][]string{kB: {r3.ReservationID}, lostB: {r7.ReservationID}, kA: nil, kC: nil} {
		if d := drift(t, s, acts[k], orders); d != 0 {
			t.Errorf("sku %d: I6 drift %d after the rebuild, want 0", k, d)
		}
	}

	// A new client meets the verified process: nothing is frozen.
	s2, _, _ := guardedStore(t, pc, ns)
	if err := reserveSettled(t, s2, rsv(kB, 8)); err != nil {
		t.Fatalf("reserve on the verified master through a new client: %v", err)
	}
	if g, err := s2.RecoveryPending(ctx); g != "" || err != nil {
		t.Fatalf("RecoveryPending through a new client = %q, %v", g, err)
	}
}

// skusOnMasters picks SKUs of activity 1 in namespace ns: kB and lostB
// served by one master (returned as b), kA and kC by the two others.
func skusOnMasters(t *testing.T, pc *privateCluster, cc *goredis.ClusterClient, ns string) (kB, lostB, kA, kC int64, b *privateNode) {
	t.Helper()
	bySlotOwner := map[string][]int64{}
	var owners []string
	for k := int64(1); k <= 64; k++ {
		id := owner(t, cc, keySlot(t, cc, skuKey(ns, 1, k)))
		if len(bySlotOwner[id]) == 0 {
			owners = append(owners, id)
		}
		bySlotOwner[id] = append(bySlotOwner[id], k)
	}
	if len(owners) != 3 || len(bySlotOwner[owners[0]]) < 2 {
		t.Fatalf("64 SKUs are served by %d masters: %v", len(owners), bySlotOwner)
	}
	nodeB := masters(t, cc)[owners[0]]
	return bySlotOwner[owners[0]][0], bySlotOwner[owners[0]][1], bySlotOwner[owners[1]][0], bySlotOwner[owners[2]][0],
		pc.node(nodeB.host + ":" + nodeB.port)
}

// runIDOf returns the run_id of the Redis process behind c.
func runIDOf(t *testing.T, c *goredis.Client) string {
	t.Helper()
	info, err := c.Info(ctxT(t), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("INFO server has no run_id")
	return ""
}
