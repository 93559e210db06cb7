package clustertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/ports"
)

// factsPG plays PostgreSQL for the stock recovery: the activities and the
// non-canceled orders per SKU. Only the reads of the recovery exist.
type factsPG struct {
	mu     sync.Mutex
	acts   []ports.Activity
	orders map[int64][]ports.Holder // by SKU of activity 1
}

func (p *factsPG) InTx(ctx context.Context, fn func(context.Context, ports.Tx) error) error {
	return fn(ctx, factsTx{p: p})
}

// factsTx is the transaction of factsPG; a method the recovery does not
// call panics (nil embedded interface).
type factsTx struct {
	ports.Tx
	p *factsPG
}

// LockPendingStockChanges implements ports.StockChangeStore: the facts
// hold no stock change.
func (factsTx) LockPendingStockChanges(context.Context, int64, int64) ([]string, error) {
	return nil, nil
}

func (t factsTx) ListActivities(context.Context) ([]ports.Activity, error) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return slices.Clone(t.p.acts), nil
}

func (t factsTx) AuditStock(_ context.Context, activityID, skuID int64, held []string) (ports.StockAudit, error) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	var a ports.StockAudit
	for _, act := range t.p.acts {
		if act.ActivityID == activityID && act.SKUID == skuID {
			a.InitialStock = act.Stock
		}
	}
	orders := t.p.orders[skuID]
	a.NonCanceledOrders = int64(len(orders))
	a.PGFinalStock = a.InitialStock - a.NonCanceledOrders
	for _, id := range held {
		if slices.ContainsFunc(orders, func(h ports.Holder) bool { return h.ReservationID == id }) {
			a.OrderedHeld = append(a.OrderedHeld, id)
		}
	}
	return a, nil
}

// CanceledReservations implements ports.AuditStore: the facts hold no
// canceled order.
func (factsTx) CanceledReservations(context.Context, int64, int64) ([]string, error) { return nil, nil }

func (t factsTx) LiveHolders(_ context.Context, _, skuID int64) ([]ports.Holder, error) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return slices.Clone(t.p.orders[skuID]), nil
}

// TestStockRecoveryRebuildsOnlyTheRestartedMaster runs the service's stock
// recovery worker (application.StockRecovery, woken by the guard) on a
// private 3-master cluster whose master B is replaced by a process started
// on an older copy of its AOF: B's SKU answers STOCK_PAUSED until the
// worker rebuilt it from PostgreSQL's facts while the other masters' SKUs
// sell throughout; afterwards the I6 drift of every SKU is 0 and no
// generation is pending.
func TestStockRecoveryRebuildsOnlyTheRestartedMaster(t *testing.T) {
	t.Parallel()
	const ns = "recoverytest"
	pc := startPrivateCluster(t)
	s, cc, g := guardedStore(t, pc, ns)
	kB, _, kA, kC, b := skusOnMasters(t, pc, cc, ns)
	pg := &factsPG{orders: map[int64][]ports.Holder{}}
	for _, k := range []int64{kB, kA, kC} {
		pg.acts = append(pg.acts, open(1, k, 10))
	}
	// A hot SKU of activity 2 whose stock is split over three lanes, lane 0
	// on B and lane 1 on another master.
	laned := open(2, lanedOnB(t, cc, ns, b), 12)
	laned.StockLanes = 3
	pg.acts = append(pg.acts, laned)
	const settle = 3 * time.Second
	rec := application.NewStockRecovery(s, pg, slog.New(slog.DiscardHandler),
		application.StockRecoveryConfig{Settle: settle, Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rec.Run(ctx, g.Wake())
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	// The fresh cluster: every master is pending; the worker seeds the
	// activities from PostgreSQL and verifies them, one master per turn.
	waitVerified := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			gen, err := s.RecoveryPending(ctx)
			if err == nil && gen == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("still pending after 30s: %q, %v", gen, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitVerified()
	rsv := func(k, user int64) ports.Holder {
		return ports.Holder{UserID: user, ReservationID: newRsv(t, 1, k, user, fmt.Sprintf("r%d", k)).ReservationID}
	}
	reserve := func(k, user int64) error {
		return reserveSettled(t, s, newRsv(t, 1, k, user, fmt.Sprintf("r%d", k)))
	}
	reserveLaned := func(user int64) error {
		return reserveSettled(t, s, newRsv(t, 2, laned.SKUID, user, "laned"))
	}
	for _, k := range []int64{kB, kA, kC} {
		for _, u := range []int64{1, 2} {
			if err := reserve(k, u); err != nil {
				t.Fatalf("reserve sku %d user %d: %v", k, u, err)
			}
		}
	}
	for u := int64(1); u <= 3; u++ {
		if err := reserveLaned(u); err != nil {
			t.Fatalf("reserve laned user %d: %v", u, err)
		}
	}
	backup := pc.copyAOF(b)
	for _, k := range []int64{kB, kA, kC} {
		for _, u := range []int64{3, 4} {
			if err := reserve(k, u); err != nil {
				t.Fatalf("reserve sku %d user %d: %v", k, u, err)
			}
		}
	}
	for u := int64(4); u <= 6; u++ { // user 6's reservation is in lane 0, on B: lost
		if err := reserveLaned(u); err != nil {
			t.Fatalf("reserve laned user %d: %v", u, err)
		}
	}
	// User 3's reservation of kB became an order before B was restored;
	// user 4's message never reached the broker.
	pg.mu.Lock()
	pg.orders[kB] = []ports.Holder{rsv(kB, 3)}
	pg.mu.Unlock()

	restarted := time.Now()
	pc.restart(b, backup)
	if err := reserve(kB, 5); !errors.Is(err, ports.ErrStockPaused) {
		t.Fatalf("reserve on the restored master %v after its restart: %v, want ErrStockPaused",
			time.Since(restarted).Round(time.Millisecond), err)
	}
	// The other masters sell while B waits for its rebuild.
	for _, k := range []int64{kA, kC} {
		if err := reserve(k, 5); err != nil {
			t.Fatalf("reserve sku %d on a healthy master during the recovery: %v", k, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for err = reserve(kB, 5); errors.Is(err, ports.ErrStockPaused) && time.Now().Before(deadline); err = reserve(kB, 5) {
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("reserve on the restored master after the recovery: %v", err)
	}
	if d := time.Since(restarted); d < settle {
		t.Errorf("the restored master sold again %v after its restart, before the settle time %v", d, settle)
	}
	waitVerified()
	if err := reserve(kB, 3); !errors.Is(err, ports.ErrAlreadyPurchased) {
		t.Fatalf("user 3 (an order PostgreSQL has) reserves again: %v, want ErrAlreadyPurchased", err)
	}
	for _, k := range []int64{kB, kA, kC} {
		var orders []string
		for _, h := range pg.orders[k] {
			orders = append(orders, h.ReservationID)
		}
		if d := drift(t, s, open(1, k, 10), orders); d != 0 {
			t.Errorf("sku %d: I6 drift %d after the recovery, want 0", k, d)
		}
	}
	// B's rebuild counted what B still had (users 1 and 2), the order
	// (user 3) and the reservation since (user 5): 10 - 4 left.
	if inv, err := s.Inventory(ctx, 1, kB); err != nil || inv.Available != 6 {
		t.Fatalf("kB after the recovery: %+v, %v; want 6 available", inv, err)
	}
	// The laned SKU was rebuilt as a whole: no drift, user 6's lost unit is
	// back (12 - 5 held), and every lane sells again.
	if d := drift(t, s, laned, nil); d != 0 {
		t.Errorf("laned SKU: I6 drift %d after the recovery, want 0", d)
	}
	if inv, err := s.Inventory(ctx, 2, laned.SKUID); err != nil || inv.Available != 7 || len(inv.Held) != 5 {
		t.Fatalf("laned SKU after the recovery: %+v, %v; want 7 available, 5 held", inv, err)
	}
	for u := int64(7); u <= 9; u++ {
		if err := reserveLaned(u); err != nil {
			t.Fatalf("reserve laned user %d after the recovery: %v", u, err)
		}
	}
}

// lanedOnB returns a SKU of activity 2 whose lane 0 is served by master b
// and whose lane 1 by another master.
func lanedOnB(t *testing.T, cc *goredis.ClusterClient, ns string, b *privateNode) int64 {
	t.Helper()
	ms := masters(t, cc)
	on := func(key string) bool {
		m := ms[owner(t, cc, keySlot(t, cc, key))]
		return m != nil && net.JoinHostPort(m.host, m.port) == b.Addr()
	}
	for k := int64(100); k < 400; k++ {
		if on(skuKey(ns, 2, k)) && !on(fmt.Sprintf("%s:{a2:s%d:l1}:stock", ns, k)) {
			return k
		}
	}
	t.Fatal("no SKU of activity 2 with lane 0 on B and lane 1 elsewhere among 300")
	return 0
}
