package application_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/adapters/testkit/redismem"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/ports"
)

// flakySwitch is the test Redis' switch, failing while fail is set.
type flakySwitch struct {
	ports.ActivitySwitch
	fail atomic.Bool
}

var errSwitch = errors.New("redis unreachable")

func (f *flakySwitch) SetPaused(ctx context.Context, a ports.Activity, paused bool) error {
	if f.fail.Load() {
		return errSwitch
	}
	return f.ActivitySwitch.SetPaused(ctx, a, paused)
}

func (f *flakySwitch) SetEndsAt(ctx context.Context, a ports.Activity, endsAt time.Time) error {
	if f.fail.Load() {
		return errSwitch
	}
	return f.ActivitySwitch.SetEndsAt(ctx, a, endsAt)
}

// opsEnv is ActivityOps and BuyerQueries over a PostgreSQL database of
// their own and the Redis adapter on a miniredis of their own
// (adapters/testkit/redismem).
type opsEnv struct {
	clock  *memory.Clock
	pg     *postgres.Store
	redis  *redismem.Redis
	sw     *flakySwitch
	admin  *application.Admin
	ops    *application.ActivityOps
	buyers *application.BuyerQueries
	place  *application.PlaceOrder
}

var opsStart = time.Date(2026, 6, 25, 17, 0, 0, 0, time.UTC)

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &opsEnv{clock: memory.NewClock(opsStart)}
	dsn := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: 8, Clock: e.clock}, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	e.pg = pg
	e.redis = redismem.New(t, e.clock, redis.Config{RateLimit: redis.RateLimit{Capacity: 100, RefillPerSecond: 100}})
	e.sw = &flakySwitch{ActivitySwitch: e.redis}
	metrics, fp := memory.NewMetrics(), memory.NewFailpoints()
	policy := application.CompensationPolicy{MaxAttempts: 5, Window: time.Hour}
	acts := application.NewActivities(pg)
	life := application.NewOrderLifecycle(pg, log, policy)
	rec := application.NewReconciler(pg, e.redis, acts, life, e.clock, metrics, log, policy,
		application.ReconcileConfig{Grace: time.Second, Batch: 100})
	broker := memory.NewBroker(memory.BrokerConfig{Clock: e.clock})
	ids := memory.NewIDs()
	dl := application.NewDeadLetters(pg, broker, e.redis, ids, metrics, log, application.DeadLetterConfig{ReplayCap: 3})
	e.admin = application.NewAdmin(pg, e.redis, acts, rec, dl, log)
	e.ops = application.NewActivityOps(pg, e.redis, rec, acts, e.sw, e.clock, log)
	e.buyers = application.NewBuyerQueries(acts, e.redis, pg, e.clock)
	gate := application.NewBacklogGate(e.redis, e.clock, metrics, log, 0.5, time.Second)
	if err := gate.Measure(ctx); err != nil {
		t.Fatal(err)
	}
	queries := application.NewQueries(e.redis.OrderViews(), pg, e.redis, e.redis)
	e.place = application.NewPlaceOrder(e.redis, e.redis, broker, acts, gate, queries,
		application.NewSentMarker(e.redis, log, 0), ids, e.clock, metrics, fp, log,
		application.PlaceOrderConfig{RequestClaimTTL: time.Hour, ScanGrace: time.Second})
	return e
}

func (e *opsEnv) create(t *testing.T, id, stock int64) {
	t.Helper()
	if _, err := e.admin.CreateActivity(context.Background(), ports.UserActor(1), ports.Activity{
		ActivityID: id, SKUID: 1, Stock: stock, StartsAt: opsStart.Add(-time.Minute), EndsAt: opsStart.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
}

func (e *opsEnv) buy(user, activity int64, req string) error {
	_, err := e.place.Place(context.Background(), ports.PlaceOrderCommand{UserID: user, ActivityID: activity, SKUID: 1,
		RequestID: req})
	return err
}

func (e *opsEnv) audits(t *testing.T, action, outcome string) int64 {
	t.Helper()
	var n int64
	if err := e.pg.InTx(context.Background(), func(ctx context.Context, tx ports.Tx) error {
		rows, err := tx.ListAudit(ctx, 0, 1000)
		for _, r := range rows {
			if r.Action == action && r.Outcome == outcome {
				n++
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// A change whose Redis switch failed answers the error with PostgreSQL
// already changed; the same call again switches and completes it (a
// pause: UNCHANGED; a close: refused as ended, yet switched), so the
// entry ends up refusing. Every call is audited, an unknown activity as
// NOT_FOUND.
func TestActivityOpsSwitchFailureRetry(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	e.create(t, 1, 10)
	actor := ports.UserActor(7)

	e.sw.fail.Store(true)
	if _, err := e.ops.PauseActivity(ctx, actor, 1, 1); !errors.Is(err, errSwitch) {
		t.Fatalf("PauseActivity with Redis failing: %v, want the switch's error", err)
	}
	st, err := e.ops.GetActivity(ctx, 1, 1)
	if err != nil || !st.Status.Paused || st.Status.State != ports.ActivityPaused {
		t.Fatalf("after a failed switch PostgreSQL holds %+v, %v; want paused", st.Status, err)
	}
	if err := e.buy(100, 1, "before-retry"); err != nil {
		t.Fatalf("the entry was not switched yet, PlaceOrder: %v", err)
	}
	e.sw.fail.Store(false)
	if st, err := e.ops.PauseActivity(ctx, actor, 1, 1); err != nil || st.State != ports.ActivityPaused {
		t.Fatalf("PauseActivity again = %+v, %v", st, err)
	}
	if err := e.buy(101, 1, "after-retry"); !errors.Is(err, ports.ErrActivityPaused) {
		t.Fatalf("PlaceOrder after the pause: %v, want ErrActivityPaused", err)
	}

	e.sw.fail.Store(true)
	if _, err := e.ops.CloseActivity(ctx, actor, 1, 1); !errors.Is(err, errSwitch) {
		t.Fatalf("CloseActivity with Redis failing: %v", err)
	}
	e.sw.fail.Store(false)
	if _, err := e.ops.ResumeActivity(ctx, actor, 1, 1); !errors.Is(err, ports.ErrActivityEnded) {
		t.Fatalf("ResumeActivity of a closed sale: %v, want ErrActivityEnded", err)
	}
	if _, err := e.ops.CloseActivity(ctx, actor, 1, 1); !errors.Is(err, ports.ErrActivityEnded) ||
		!errors.Is(err, ports.ErrActivityState) {
		t.Fatalf("CloseActivity again: %v, want ErrActivityState and ErrActivityEnded", err)
	}
	if err := e.buy(102, 1, "after-close"); !errors.Is(err, ports.ErrActivityEnded) {
		t.Fatalf("PlaceOrder after the refused close re-switched: %v, want ErrActivityEnded", err)
	}
	if _, err := e.ops.PauseActivity(ctx, actor, 9, 9); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("PauseActivity of an unknown activity: %v, want ErrNotFound", err)
	}
	for _, c := range []struct {
		action, outcome string
		want            int64
	}{
		{"PAUSE_ACTIVITY", ports.AuditOK, 1}, {"PAUSE_ACTIVITY", ports.AuditUnchanged, 1},
		{"CLOSE_ACTIVITY", ports.AuditOK, 1}, {"CLOSE_ACTIVITY", "REFUSED", 1}, {"RESUME_ACTIVITY", "REFUSED", 1},
		{"PAUSE_ACTIVITY", ports.AuditNotFound, 1},
	} {
		if n := e.audits(t, c.action, c.outcome); n != c.want {
			t.Errorf("%d audit rows %s %s, want %d", n, c.action, c.outcome, c.want)
		}
	}
}

// SOLD_OUT is Redis's answer: a sale whose stock is all reserved lists
// under SOLD_OUT (not ON_SALE) and buyers see it sold out; a paused one
// shows PAUSED whatever its stock.
func TestActivityOpsSoldOut(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	e.create(t, 1, 1)
	e.create(t, 2, 5)
	if err := e.buy(100, 1, "last"); err != nil {
		t.Fatal(err)
	}
	ids := func(states ...ports.ActivityState) []int64 {
		page, err := e.ops.ListActivities(ctx, ports.ActivityFilter{States: states}, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, a := range page.Activities {
			out = append(out, a.Activity.ActivityID)
		}
		return out
	}
	if got := ids(ports.ActivitySoldOut); len(got) != 1 || got[0] != 1 {
		t.Fatalf("SOLD_OUT lists %v, want [1]", got)
	}
	if got := ids(ports.ActivityOnSale); len(got) != 1 || got[0] != 2 {
		t.Fatalf("ON_SALE lists %v, want [2]", got)
	}
	b, err := e.buyers.GetActivity(ctx, 1, 1)
	if err != nil || !b.SoldOut || b.State != ports.ActivitySoldOut || !b.ServerTime.Equal(opsStart) {
		t.Fatalf("buyer GetActivity = %+v, %v; want sold out at the server's time", b, err)
	}
	if _, err := e.ops.PauseActivity(ctx, ports.UserActor(7), 1, 1); err != nil {
		t.Fatal(err)
	}
	if got := ids(ports.ActivityPaused); len(got) != 1 || got[0] != 1 {
		t.Fatalf("PAUSED lists %v, want [1]", got)
	}
	if b, err := e.buyers.GetActivity(ctx, 1, 1); err != nil || b.State != ports.ActivityPaused {
		t.Fatalf("buyer GetActivity after the pause = %+v, %v; want PAUSED at once in this process", b, err)
	}
	if _, err := e.ops.ListActivities(ctx, ports.ActivityFilter{}, 501, ""); err == nil {
		t.Fatal("a page size of 501 was accepted")
	}
	var fe *ports.FieldError
	if _, err := e.ops.ListActivities(ctx, ports.ActivityFilter{}, 0, "x"); !errors.As(err, &fe) || fe.Field != "page_token" {
		t.Fatalf("a bad token: %v, want a FieldError on page_token", err)
	}
}
