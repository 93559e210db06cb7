package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/failpoint"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// stockEnv is StockChanges over real PostgreSQL (a database of its own)
// and real Redis (a namespace of its own, behind a guard, so a test can
// play a Redis that came back as another process).
type stockEnv struct {
	t       *testing.T
	pg      *postgres.Store
	db      *pgxpool.Pool
	base    *goredis.Client
	ns      string
	guard   *redis.Guard
	rs      *redis.Store
	fp      *failpoint.Registry
	place   *PlaceOrder
	acts    *Activities
	changes *StockChanges
	seq     atomic.Int64
}

func newStockEnv(t *testing.T) *stockEnv {
	t.Helper()
	t.Parallel()
	e := &stockEnv{t: t}
	dsn := pgtest.NewDatabase(t)
	pg, err := postgres.Open(e.ctx(), postgres.Config{DSN: dsn, MaxConns: 8, StockBuckets: 4},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	e.pg, e.db = pg, pgtest.Pool(t, dsn)
	e.base, e.ns = redistest.New(t)
	if e.guard, err = redis.NewGuard(e.ns, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	e.connect()
	gen, err := e.rs.RecoveryPending(e.ctx())
	if err != nil || gen == "" {
		t.Fatalf("RecoveryPending on a fresh namespace = %q, %v", gen, err)
	}
	if ok, err := e.rs.FinishRecovery(e.ctx(), gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	if e.fp, err = failpoint.New(""); err != nil {
		t.Fatal(err)
	}
	e.place = &PlaceOrder{soldOut: newSoldOutMarks(time.Hour)}
	e.acts = NewActivities(pg)
	e.wire()
	return e
}

// connect builds the Redis store on a new client, whose connections run
// the guard.
func (e *stockEnv) connect() {
	o := e.base.Options()
	c := goredis.NewClient(&goredis.Options{Addr: o.Addr, DB: o.DB, OnConnect: e.guard.OnConnect})
	e.t.Cleanup(func() { _ = c.Close() })
	rs, err := redis.New(c, redis.Config{Namespace: e.ns, Guard: e.guard}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	e.rs = rs
}

// wire (re)builds the use case over the current stores.
func (e *stockEnv) wire() {
	e.changes = NewStockChanges(e.pg, e.rs, e.acts, e.place, e.fp, slog.New(slog.DiscardHandler),
		StockChangesConfig{RecoverAfter: time.Nanosecond})
}

func (e *stockEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// activity creates and seeds activity id / SKU 1 with stock units over
// lanes lanes, open from an hour ago for an hour (or closed an hour ago
// when ended).
func (e *stockEnv) activity(id, stock int64, lanes int, ended bool) ports.Activity {
	e.t.Helper()
	now := time.Now().UTC()
	a := ports.Activity{ActivityID: id, SKUID: 1, Stock: stock, StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute, StockLanes: lanes}
	if ended {
		a.StartsAt, a.EndsAt = now.Add(-2*time.Hour), now.Add(-time.Hour)
	}
	if err := e.pg.InTx(e.ctx(), func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.CreateActivity(ctx, a)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rs.SeedActivity(e.ctx(), a); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// reserve reserves n units for new users and fails on any error.
func (e *stockEnv) reserve(a ports.Activity, n int) {
	e.t.Helper()
	for range n {
		if err := e.tryReserve(a); err != nil {
			e.t.Fatalf("Reserve: %v", err)
		}
	}
}

// tryReserve reserves one unit for a new user.
func (e *stockEnv) tryReserve(a ports.Activity) error {
	e.t.Helper()
	k := e.seq.Add(1)
	r, err := reservation.New(reservation.NewReservation{
		ReservationID: fmt.Sprintf("rsv_%d", k), OrderID: fmt.Sprintf("ord_%d", k), MessageID: fmt.Sprintf("evt_%d", k),
		RequestID: fmt.Sprintf("req_%d", k), ActivityID: a.ActivityID, SKUID: a.SKUID, UserID: k, TTL: time.Minute,
	}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = e.rs.Reserve(e.ctx(), r.Snapshot(), time.Now().Add(time.Hour))
	return err
}

// reservable counts how many more units new users can reserve (at most
// limit), selling them.
func (e *stockEnv) reservable(a ports.Activity, limit int) int {
	e.t.Helper()
	for i := range limit {
		if err := e.tryReserve(a); err != nil {
			if !errors.Is(err, ports.ErrSoldOut) {
				e.t.Fatalf("Reserve: %v", err)
			}
			return i
		}
	}
	return limit
}

// books returns PostgreSQL's initial and final stock and the I6 drift of
// the activity SKU (every reservation is pending: no order exists).
func (e *stockEnv) books(a ports.Activity) (initial, final, drift int64) {
	e.t.Helper()
	r := NewReconciler(e.pg, e.rs, e.acts, nil, memory.NewClock(time.Now()), memory.NewMetrics(),
		slog.New(slog.DiscardHandler), CompensationPolicy{}, ReconcileConfig{})
	rep, err := r.StockReport(e.ctx(), a.ActivityID, a.SKUID)
	if err != nil {
		e.t.Fatalf("StockReport: %v", err)
	}
	return rep.InitialStock, rep.PGFinalStock, rep.Drift()
}

// count runs a count query on the test's database.
func (e *stockEnv) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.QueryRow(e.ctx(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (e *stockEnv) add(a ports.Activity, requestID string, n int64) (ports.StockChangeResult, error) {
	return e.changes.AddStock(e.ctx(), "user:1", ports.StockChange{ActivityID: a.ActivityID, SKUID: a.SKUID,
		Quantity: n, RequestID: requestID})
}

func (e *stockEnv) remove(a ports.Activity, requestID string, n int64) (ports.StockChangeResult, error) {
	return e.changes.RemoveStock(e.ctx(), "user:1", ports.StockChange{ActivityID: a.ActivityID, SKUID: a.SKUID,
		Quantity: n, RequestID: requestID})
}

func wantField(t *testing.T, err error, field, text string) {
	t.Helper()
	var fe *ports.FieldError
	if !errors.As(err, &fe) || fe.Field != field || !strings.Contains(fe.Description, text) {
		t.Fatalf("error = %v, want a *FieldError on %s saying %q", err, field, text)
	}
}

// TestAddStockOnce: a restock of a sold-out SKU makes exactly its units
// reservable once more and drops this process's sold-out mark at once; a
// retry changes neither book again; the request id of another change is
// refused; both books balance after it (drift 0) and every call is
// audited.
func TestAddStockOnce(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 2, 1, false)
	e.reserve(a, 2)
	e.place.soldOut.mark(1, 1, time.Now())
	got, err := e.add(a, "restock-1", 3)
	if err != nil || got != (ports.StockChangeResult{Applied: true, Stock: 5, Available: 3}) {
		t.Fatalf("AddStock = %+v, %v; want applied, stock 5, 3 available", got, err)
	}
	if e.place.soldOut.soldOut(1, 1, time.Now()) {
		t.Fatal("the sold-out mark survived the restock")
	}
	for range 2 {
		got, err = e.add(a, "restock-1", 3)
		if err != nil || got != (ports.StockChangeResult{Stock: 5, Available: 3}) {
			t.Fatalf("AddStock again = %+v, %v; want not applied, stock 5, 3 available", got, err)
		}
	}
	_, err = e.add(a, "restock-1", 4)
	wantErrIs(t, err, ports.ErrRequestIDReused)
	_, err = e.remove(a, "restock-1", 3)
	wantErrIs(t, err, ports.ErrRequestIDReused)
	if n := e.reservable(a, 10); n != 3 {
		t.Fatalf("reservable after the restock = %d, want 3", n)
	}
	if initial, final, drift := e.books(a); initial != 5 || final != 5 || drift != 0 {
		t.Fatalf("books: initial %d final %d drift %d; want 5, 5, 0", initial, final, drift)
	}
	if cached, err := e.acts.Get(e.ctx(), 1, 1); err != nil || cached.Stock != 5 {
		t.Fatalf("cached activity stock = %d, %v; want 5", cached.Stock, err)
	}
	for outcome, want := range map[string]int64{ports.AuditStockApplied: 1, ports.AuditStockRepeated: 2, ports.AuditRequestIDReused: 2} {
		if n := e.count(`SELECT count(*) FROM admin_audit WHERE target = 'activity:1/1' AND outcome = $1`, outcome); n != want {
			t.Errorf("%s audit rows = %d, want %d", outcome, n, want)
		}
	}
	if n := e.count(`SELECT count(*) FROM admin_audit WHERE outcome = 'APPLIED' AND action = 'ADD_STOCK'
		AND (params->>'stock_before')::int = 2 AND (params->>'stock_after')::int = 5`); n != 1 {
		t.Errorf("the APPLIED audit row lacks the stock before and after")
	}
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

// TestStockChangeRequests: bad requests are *FieldErrors naming the field,
// an unknown SKU is ErrNotFound, a sale that has ended is ErrActivityState,
// a missing actor ErrPermissionDenied; none changes a book.
func TestStockChangeRequests(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 2, 1, false)
	ended := e.activity(2, 2, 1, true)
	_, err := e.add(a, "q", 0)
	wantField(t, err, "quantity", "> 0")
	_, err = e.remove(a, "q", -1)
	wantField(t, err, "quantity", "> 0")
	_, err = e.add(a, "", 1)
	wantField(t, err, "request_id", "required")
	_, err = e.add(a, strings.Repeat("x", 129), 1)
	wantField(t, err, "request_id", "128")
	_, err = e.add(ports.Activity{ActivityID: 0, SKUID: 1}, "q", 1)
	wantField(t, err, "activity_id", "> 0")
	_, err = e.add(ports.Activity{ActivityID: 9, SKUID: 1}, "q", 1)
	wantErrIs(t, err, ports.ErrNotFound)
	_, err = e.add(ended, "q", 1)
	wantErrIs(t, err, ports.ErrActivityState)
	_, err = e.changes.AddStock(e.ctx(), "", ports.StockChange{ActivityID: 1, SKUID: 1, Quantity: 1, RequestID: "q"})
	wantErrIs(t, err, ports.ErrPermissionDenied)
	if initial, _, drift := e.books(a); initial != 2 || drift != 0 {
		t.Fatalf("books after refused requests: initial %d drift %d; want 2, 0", initial, drift)
	}
	if n := e.count(`SELECT count(*) FROM stock_changes`); n != 0 {
		t.Fatalf("%d stock changes recorded, want none", n)
	}
}

// TestRemoveStockOnlyUnreserved: a removal of more units than are
// unreserved changes nothing and says how many could go (a retry says the
// same); one within them removes them from both books once.
func TestRemoveStockOnlyUnreserved(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 5, 1, false)
	e.reserve(a, 2)
	for range 2 {
		_, err := e.remove(a, "cut-4", 4)
		wantField(t, err, "quantity", "only 3 unreserved units")
	}
	got, err := e.remove(a, "cut-3", 3)
	if err != nil || got != (ports.StockChangeResult{Applied: true, Stock: 2, Available: 0}) {
		t.Fatalf("RemoveStock 3 = %+v, %v; want applied, stock 2, 0 available", got, err)
	}
	if got, err := e.remove(a, "cut-3", 3); err != nil || got.Applied || got.Stock != 2 {
		t.Fatalf("RemoveStock 3 again = %+v, %v; want not applied, stock 2", got, err)
	}
	if initial, final, drift := e.books(a); initial != 2 || final != 2 || drift != 0 {
		t.Fatalf("books: initial %d final %d drift %d; want 2, 2, 0", initial, final, drift)
	}
	if n := e.reservable(a, 5); n != 0 {
		t.Fatalf("reservable after removing every unreserved unit = %d, want 0", n)
	}
	if n := e.count(`SELECT count(*) FROM admin_audit WHERE action = 'REMOVE_STOCK' AND outcome = 'REFUSED'`); n != 1 {
		t.Fatalf("REFUSED audit rows = %d, want 1 (the retry is REPEATED)", n)
	}
}

// TestStockChangeCrashBetweenRedisAndPostgres: the process "dies" after
// the Redis step (failpoint stockchange.after_redis); the change stays
// PENDING with Redis applied, the reconciler leaves the SKU out of the
// drift, and the recovery worker finishes it without adding the units to
// Redis a second time; a retry of the call then changes nothing.
func TestStockChangeCrashBetweenRedisAndPostgres(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 4, 1, false)
	if err := e.fp.Set(ports.FailStockChangeAfterRedis, "error"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.add(a, "restock", 6); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("AddStock at the failpoint: %v, want the injected failure", err)
	}
	if n := e.count(`SELECT count(*) FROM stock_changes WHERE status = 'PENDING'`); n != 1 {
		t.Fatalf("PENDING changes = %d, want 1", n)
	}
	if inv, err := e.rs.Inventory(e.ctx(), 1, 1); err != nil || inv.Available != 10 {
		t.Fatalf("Redis after the crash = %+v, %v; want 10 available (Redis applied)", inv, err)
	}
	r := NewReconciler(e.pg, e.rs, e.acts, nil, memory.NewClock(time.Now()), memory.NewMetrics(),
		slog.New(slog.DiscardHandler), CompensationPolicy{}, ReconcileConfig{})
	if changing, err := r.stockChanging(e.ctx(), a); err != nil || !changing {
		t.Fatalf("stockChanging = %v, %v; want the SKU left out of the drift", changing, err)
	}
	// The worker fails too while the point is set, and changes nothing.
	if n, err := e.changes.Recover(e.ctx()); n != 0 || !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("Recover at the failpoint = %d, %v", n, err)
	}
	e.fp.Clear(ports.FailStockChangeAfterRedis)
	if n, err := e.changes.Recover(e.ctx()); n != 1 || err != nil {
		t.Fatalf("Recover = %d, %v; want the change finished", n, err)
	}
	if n, err := e.changes.Recover(e.ctx()); n != 0 || err != nil {
		t.Fatalf("Recover again = %d, %v; want nothing to do", n, err)
	}
	if got, err := e.add(a, "restock", 6); err != nil || got != (ports.StockChangeResult{Stock: 10, Available: 10}) {
		t.Fatalf("AddStock retried = %+v, %v; want not applied, stock 10, 10 available", got, err)
	}
	if initial, final, drift := e.books(a); initial != 10 || final != 10 || drift != 0 {
		t.Fatalf("books: initial %d final %d drift %d; want 10, 10, 0", initial, final, drift)
	}
	if n := e.reservable(a, 20); n != 10 {
		t.Fatalf("reservable = %d, want 10", n)
	}
	if n := e.count(`SELECT count(*) FROM admin_audit WHERE outcome = 'APPLIED' AND params->>'finished_by' = $1`,
		ports.ActorStockChanges); n != 1 {
		t.Fatalf("APPLIED audit rows by the worker = %d, want 1", n)
	}
}

// TestStockRecoveryRebuildKeepsEveryChangeOnce: on a laned SKU, one
// restock is APPLIED, one is left PENDING after its Redis step, and Redis
// comes back as another process (books frozen). A change asked for while
// frozen waits. The rebuild writes the books from PostgreSQL (the APPLIED
// restock only), then the worker finishes the PENDING changes in the new
// books: every change counts exactly once in both books and the lanes
// share the units.
func TestStockRecoveryRebuildKeepsEveryChangeOnce(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 6, 3, false)
	if got, err := e.add(a, "applied", 3); err != nil || !got.Applied || got.Available != 9 {
		t.Fatalf("AddStock = %+v, %v", got, err)
	}
	if err := e.fp.Set(ports.FailStockChangeAfterRedis, "error"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.add(a, "pending", 4); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("AddStock at the failpoint: %v", err)
	}
	e.fp.Clear(ports.FailStockChangeAfterRedis)
	e.reserve(a, 2)

	// Redis comes back as another process: every SKU is frozen.
	if err := e.base.HSet(e.ctx(), e.ns+":generation", "run_id", "the-process-that-acknowledged").Err(); err != nil {
		t.Fatal(err)
	}
	e.connect()
	e.wire()
	gen, err := e.rs.RecoveryPending(e.ctx())
	if err != nil || gen == "" {
		t.Fatalf("RecoveryPending = %q, %v", gen, err)
	}
	if _, err := e.add(a, "while-frozen", 2); !errors.Is(err, ports.ErrStockPaused) {
		t.Fatalf("AddStock while frozen: %v, want ErrStockPaused", err)
	}
	rec := NewStockRecovery(e.rs, e.pg, slog.New(slog.DiscardHandler), StockRecoveryConfig{})
	rep, err := rec.Recover(e.ctx())
	if err != nil || !rep.Finished || rep.Rebuilt != 1 {
		t.Fatalf("stock recovery = %+v, %v", rep, err)
	}
	// PostgreSQL's stock (6 + 3) minus the 2 reservations in flight.
	if inv, err := e.rs.Inventory(e.ctx(), 1, 1); err != nil || inv.Available != 7 {
		t.Fatalf("Redis after the rebuild = %+v, %v; want 7 available", inv, err)
	}
	if n, err := e.changes.Recover(e.ctx()); n != 2 || err != nil {
		t.Fatalf("Recover = %d, %v; want both pending changes finished", n, err)
	}
	for _, id := range []string{"applied", "pending", "while-frozen"} {
		if _, err := e.changes.AddStock(e.ctx(), "user:1", ports.StockChange{ActivityID: 1, SKUID: 1, RequestID: id,
			Quantity: map[string]int64{"applied": 3, "pending": 4, "while-frozen": 2}[id]}); err != nil {
			t.Fatalf("retry of %s: %v", id, err)
		}
	}
	if initial, final, drift := e.books(a); initial != 15 || final != 15 || drift != 0 {
		t.Fatalf("books: initial %d final %d drift %d; want 15, 15, 0", initial, final, drift)
	}
	if n := e.reservable(a, 30); n != 13 {
		t.Fatalf("reservable = %d, want 13 (15 minus the 2 held)", n)
	}
}

// TestStockRecoveryDoesNotGiveACanceledOrdersUnitBackTwice: an order is
// canceled in PostgreSQL while its release (the compensation) is still in
// flight when Redis comes back as another process with its reservations
// (from its append-only file). The rebuild counts the canceled order's
// unit as available (PostgreSQL's books), so it marks that reservation
// released: the compensation that arrives afterwards finds it released
// and gives nothing back, and the books balance. Before the rebuild knew
// the canceled orders, that release gave the unit back a second time
// (seen as a drift of -3 in a soak with a kill of Redis mid-sale).
func TestStockRecoveryDoesNotGiveACanceledOrdersUnitBackTwice(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 5, 1, false)
	e.reserve(a, 2) // rsv_1 of user 1, rsv_2 of user 2
	refs := []ports.ReservationRef{{ActivityID: 1, SKUID: 1, ReservationID: "rsv_1", UserID: 1},
		{ActivityID: 1, SKUID: 1, ReservationID: "rsv_2", UserID: 2}}
	if err := e.rs.MarkOrdered(e.ctx(), refs); err != nil {
		t.Fatal(err)
	}
	// ord_1 is live; ord_2 was canceled and its release has not run.
	if _, err := e.db.Exec(e.ctx(), `
		INSERT INTO orders (order_id, reservation_id, activity_id, sku_id, user_id, quantity, status, cancel_reason,
		                    aggregate_version, created_at, updated_at, expires_at, canceled_at)
		VALUES ('ord_1', 'rsv_1', 1, 1, 1, 1, 'CREATED', NULL, 1, now(), now(), now() + interval '1 minute', NULL),
		       ('ord_2', 'rsv_2', 1, 1, 2, 1, 'CANCELED', 'BUYER_CANCELED', 2, now(), now(), now() + interval '1 minute', now())`); err != nil {
		t.Fatal(err)
	}

	// Redis comes back as another process, its reservations kept.
	if err := e.base.HSet(e.ctx(), e.ns+":generation", "run_id", "the-process-that-acknowledged").Err(); err != nil {
		t.Fatal(err)
	}
	e.connect()
	e.wire()
	rec := NewStockRecovery(e.rs, e.pg, slog.New(slog.DiscardHandler), StockRecoveryConfig{})
	if rep, err := rec.Recover(e.ctx()); err != nil || !rep.Finished || rep.Rebuilt != 1 {
		t.Fatalf("stock recovery = %+v, %v", rep, err)
	}
	// PostgreSQL's books: 5 units, one live order.
	if inv, err := e.rs.Inventory(e.ctx(), 1, 1); err != nil || inv.Available != 4 {
		t.Fatalf("Redis after the rebuild = %+v, %v; want 4 available", inv, err)
	}

	// The compensation of ord_2 arrives: the unit is back already.
	released, err := e.rs.Release(e.ctx(), refs[1], reservation.ReasonOrderCanceled)
	if err != nil || released {
		t.Fatalf("release of the canceled order's reservation after the rebuild = %v, %v; want false (released by the rebuild)", released, err)
	}
	if inv, err := e.rs.Inventory(e.ctx(), 1, 1); err != nil || inv.Available != 4 {
		t.Fatalf("Redis after the late release = %+v, %v; want still 4 available (the unit given back once)", inv, err)
	}
}

// TestStockRecoveryWaitsForAChangeBeingFinished: a change whose Redis
// step ran before Redis came back as another process is being committed
// APPLIED (its transaction holds the row) when the stock recovery starts:
// the recovery waits for it and rebuilds from the stock that includes it,
// so Redis counts the change once and the books balance.
func TestStockRecoveryWaitsForAChangeBeingFinished(t *testing.T) {
	e := newStockEnv(t)
	a := e.activity(1, 4, 1, false)
	if err := e.fp.Set(ports.FailStockChangeAfterRedis, "error"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.add(a, "late", 3); !errors.Is(err, failpoint.ErrInjected) {
		t.Fatalf("AddStock at the failpoint: %v", err)
	}
	e.fp.Clear(ports.FailStockChangeAfterRedis)
	if err := e.base.HSet(e.ctx(), e.ns+":generation", "run_id", "the-process-that-acknowledged").Err(); err != nil {
		t.Fatal(err)
	}
	e.connect()
	e.wire()

	// The finishing transaction, past its Redis step, holds the row.
	locked, commit := make(chan struct{}), make(chan struct{})
	finished := make(chan error, 1)
	go func() {
		finished <- e.pg.InTx(e.ctx(), func(ctx context.Context, tx ports.Tx) error {
			if _, err := tx.LockStockChange(ctx, "late"); err != nil {
				close(locked)
				return err
			}
			close(locked)
			select {
			case <-commit:
			case <-ctx.Done():
				return ctx.Err()
			}
			_, err := tx.ApplyStockChange(ctx, "late", 7)
			return err
		})
	}()
	<-locked
	rec := NewStockRecovery(e.rs, e.pg, slog.New(slog.DiscardHandler), StockRecoveryConfig{})
	recovered := make(chan error, 1)
	go func() {
		rep, err := rec.Recover(e.ctx())
		if err == nil && (!rep.Finished || rep.Rebuilt != 1) {
			err = fmt.Errorf("recovery report %+v", rep)
		}
		recovered <- err
	}()
	// Let the recovery reach the lock (or, were it not taken, finish).
	for range 250 {
		if e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0 ||
			len(recovered) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(commit)
	if err := <-finished; err != nil {
		t.Fatalf("finishing transaction: %v", err)
	}
	if err := <-recovered; err != nil {
		t.Fatalf("stock recovery: %v", err)
	}
	if n, err := e.changes.Recover(e.ctx()); n != 0 || err != nil {
		t.Fatalf("Recover = %d, %v; want nothing left", n, err)
	}
	if initial, final, drift := e.books(a); initial != 7 || final != 7 || drift != 0 {
		t.Fatalf("books: initial %d final %d drift %d; want 7, 7, 0", initial, final, drift)
	}
	if n := e.reservable(a, 20); n != 7 {
		t.Fatalf("reservable = %d, want 7", n)
	}
}
