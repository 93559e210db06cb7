package redismem_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redismem"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// start is the fake clocks' initial time in these tests.
var start = time.Date(2030, time.March, 1, 12, 0, 0, 0, time.UTC)

// The wrapper passes every call of the shared suites through to the
// adapter when no fault is armed.
func TestContract(t *testing.T) {
	t.Run("Reservations", func(t *testing.T) {
		contracttest.Reservations(t, func(t *testing.T, cfg contracttest.ReservationsConfig) contracttest.ReservationsSetup {
			r := redismem.New(t, memory.ClockFunc(cfg.Now), redis.Config{
				RateLimit: redis.RateLimit{Capacity: cfg.RateCapacity, RefillPerSecond: cfg.RefillPerSecond}})
			return contracttest.ReservationsSetup{Reservations: r, Admission: r, Backlog: r}
		})
	})
	t.Run("OrderViews", func(t *testing.T) {
		contracttest.OrderViews(t, func(t *testing.T) ports.OrderViews {
			return redismem.New(t, memory.NewClock(start), redis.Config{}).OrderViews()
		})
	})
}

func activity(id int64, stock int64, lanes int) ports.Activity {
	return ports.Activity{ActivityID: id, SKUID: 1, Stock: stock, StartsAt: start, EndsAt: start.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: 2 * time.Minute, StockLanes: lanes}
}

// reserve reserves one unit of activity id for user at the clock's time.
func reserve(t *testing.T, r *redismem.Redis, clock *memory.Clock, id, user int64) reservation.Snapshot {
	t.Helper()
	rid := fmt.Sprintf("rsv_%d_%d", id, user)
	rsv, err := reservation.New(reservation.NewReservation{ReservationID: rid, OrderID: "ord" + rid[3:],
		MessageID: "evt" + rid[3:], RequestID: "q" + rid[3:], ActivityID: id, SKUID: 1, UserID: user, TTL: time.Minute},
		clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Reserve(t.Context(), rsv.Snapshot(), clock.Now().Add(time.Second))
	if err != nil {
		t.Fatalf("reserve activity %d user %d: %v", id, user, err)
	}
	return got
}

func claim(user int64, requestID string) ports.RequestClaim {
	return ports.RequestClaim{UserID: user, RequestID: requestID, ActivityID: 1, SKUID: 1, ReservationID: "rsv_" + requestID,
		OrderID: "ord_" + requestID, MessageID: "evt_" + requestID}
}

// Request claims and order lookups expire on the test's clock: the hook
// moves miniredis' clock before every command.
func TestClaimExpiresOnTheClock(t *testing.T) {
	clock := memory.NewClock(start)
	r := redismem.New(t, clock, redis.Config{RateLimit: redis.RateLimit{Capacity: -1}})
	ctx := t.Context()
	c := claim(1, "q")
	if _, _, err := r.ClaimRequest(ctx, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute - time.Millisecond)
	if _, err := r.LookupOrder(ctx, 1, c.OrderID); err != nil {
		t.Fatalf("LookupOrder before the ttl: %v", err)
	}
	clock.Advance(time.Millisecond)
	if _, err := r.LookupOrder(ctx, 1, c.OrderID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("LookupOrder after the ttl = %v, want ErrNotFound", err)
	}
	other := c
	other.SKUID, other.OrderID = 2, "ord_other"
	if _, existing, err := r.ClaimRequest(ctx, other, time.Minute); err != nil || existing {
		t.Fatalf("ClaimRequest after expiry = existing %v, %v; want a fresh claim", existing, err)
	}
}

// A fault armed before the effect fails the call without reaching Redis;
// one armed after it lets the call take effect and loses its reply; Times
// bounds how many calls it hits; ClearFaults and a nil error disarm.
func TestFaults(t *testing.T) {
	clock := memory.NewClock(start)
	r := redismem.New(t, clock, redis.Config{})
	ctx := t.Context()
	boom := errors.New("boom")

	r.FailOn(redismem.MethodSeedActivity, fmt.Errorf("%w: %w", ports.ErrTransient, boom))
	if err := r.SeedActivity(ctx, activity(1, 2, 1)); !errors.Is(err, ports.ErrTransient) || !errors.Is(err, boom) {
		t.Fatalf("SeedActivity with a fault = %v, want the injected error", err)
	}
	if _, ok := r.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]; ok {
		t.Fatal("a seed that failed before its effect seeded the activity")
	}
	r.ClearFaults()
	if err := r.SeedActivity(ctx, activity(1, 2, 1)); err != nil {
		t.Fatal(err)
	}

	r.Inject(redismem.MethodClaimRequest, redismem.Fault{Err: ports.ErrTransient, AfterEffect: true, Times: 1})
	if _, _, err := r.ClaimRequest(ctx, claim(7, "lost"), time.Hour); !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("ClaimRequest with a lost reply = %v, want the injected error", err)
	}
	again := claim(7, "lost")
	again.ReservationID, again.OrderID, again.MessageID = "rsv_again", "ord_again", "evt_again"
	if bound, existing, err := r.ClaimRequest(ctx, again, time.Hour); err != nil || !existing || bound != claim(7, "lost") {
		t.Fatalf("ClaimRequest again = %+v, existing %v, %v; want the claim the lost call made", bound, existing, err)
	}

	held := reserve(t, r, clock, 1, 7)
	ref := ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: held.ReservationID, UserID: 7}
	r.Inject(redismem.MethodReleaseMany, redismem.Fault{Err: ports.ErrTransient, AfterEffect: true, Times: 1})
	res := r.ReleaseMany(ctx, []ports.ReleaseRequest{{Ref: ref, Reason: reservation.ReasonOrderCanceled},
		{Ref: ref, Reason: "NO_SUCH_REASON"}})
	if !errors.Is(res[0].Err, ports.ErrTransient) || !errors.Is(res[1].Err, reservation.ErrInvalid) {
		t.Fatalf("ReleaseMany with a lost reply = %+v, want the injected error and the invalid reason", res)
	}
	if got := r.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]; got.Stock != 2 || len(got.Holders) != 0 {
		t.Fatalf("after a lost release reply: stock %d holders %v, want the unit back", got.Stock, got.Holders)
	}
	if res := r.ReleaseMany(ctx, []ports.ReleaseRequest{{Ref: ref, Reason: reservation.ReasonOrderCanceled}}); res[0].Err != nil || res[0].Released {
		t.Fatalf("ReleaseMany again = %+v, want released before", res)
	}

	r.FailOn(redismem.MethodInventory, boom)
	r.FailOn(redismem.MethodMarkOrdered, boom)
	r.FailOn(redismem.MethodViewApply, boom)
	if _, err := r.Inventory(ctx, 1, 1); !errors.Is(err, boom) {
		t.Fatalf("Inventory = %v, want the injected error", err)
	}
	if err := r.MarkOrdered(ctx, []ports.ReservationRef{ref}); !errors.Is(err, boom) {
		t.Fatalf("MarkOrdered = %v, want the injected error", err)
	}
	if _, err := r.OrderViews().Apply(ctx, ports.OrderView{OrderID: "ord_1", AggregateVersion: 1}); !errors.Is(err, boom) {
		t.Fatalf("Apply = %v, want the injected error", err)
	}
	r.FailOn(redismem.MethodViewApply, nil)
	if ok, err := r.OrderViews().Apply(ctx, ports.OrderView{OrderID: "ord_1", AggregateVersion: 1}); err != nil || !ok {
		t.Fatalf("Apply after FailOn(nil) = %v, %v", ok, err)
	}
	if _, err := r.Inventory(ctx, 1, 1); !errors.Is(err, boom) {
		t.Fatalf("Inventory after disarming another method = %v, want the injected error", err)
	}

}

// Snapshot reports every activity SKU (lanes joined), its holders and
// reservations and the order views.
func TestSnapshot(t *testing.T) {
	clock := memory.NewClock(start)
	r := redismem.New(t, clock, redis.Config{})
	ctx := t.Context()
	if s := r.Snapshot(); len(s.Slots) != 0 || len(s.Views) != 0 {
		t.Fatalf("empty Redis: %+v", s)
	}
	one, split := activity(1, 5, 1), activity(2, 7, 3)
	split.Paused = true
	for _, a := range []ports.Activity{one, split} {
		if err := r.SeedActivity(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetPaused(ctx, split, false); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	first := reserve(t, r, clock, 1, 10)
	clock.Advance(time.Second)
	second := reserve(t, r, clock, 1, 11)
	for user := int64(20); user < 23; user++ {
		reserve(t, r, clock, 2, user)
	}
	if _, err := r.Release(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: first.ReservationID},
		reservation.ReasonOrderCanceled); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ClaimDue(ctx, clock.Now().Add(time.Minute), 10, "scanner", time.Second); err != nil {
		t.Fatal(err)
	}
	view := ports.OrderView{OrderID: second.OrderID, ReservationID: second.ReservationID, ActivityID: 1, SKUID: 1,
		UserID: 11, Status: ports.OrderCreated, AggregateVersion: 1, CreatedAt: clock.Now()}
	if _, err := r.OrderViews().Apply(ctx, view); err != nil {
		t.Fatal(err)
	}

	s := r.Snapshot()
	got := s.Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]
	want := one
	want.StockLanes = 1
	if got.Activity != want {
		t.Fatalf("activity %+v, want %+v", got.Activity, want)
	}
	if got.Stock != 4 || len(got.Holders) != 1 || got.Holders[11] != second.ReservationID {
		t.Fatalf("stock %d holders %v, want 4 and user 11 holding %s", got.Stock, got.Holders, second.ReservationID)
	}
	if len(got.Reservations) != 2 || got.Reservations[0].Snapshot.ReservationID != first.ReservationID ||
		got.Reservations[0].Snapshot.Status != reservation.StatusReleased ||
		got.Reservations[1].Snapshot.Status != reservation.StatusPending {
		t.Fatalf("reservations %+v, want the released one, then the pending one", got.Reservations)
	}
	pending := got.Reservations[1]
	if pending.LeaseOwner != "scanner" || !pending.LeaseUntil.Equal(clock.Now().Add(time.Minute+time.Second)) ||
		!pending.NextAttemptAt.Equal(pending.LeaseUntil) || pending.Snapshot.SendAttempt != 1 {
		t.Fatalf("claimed reservation %+v, want leased by the scanner", pending)
	}

	lanes := s.Slots[redismem.SKU{ActivityID: 2, SKUID: 1}]
	want = split
	want.Paused = false
	if lanes.Activity != want {
		t.Fatalf("activity on lanes %+v, want %+v", lanes.Activity, want)
	}
	if lanes.Stock != 4 || len(lanes.Holders) != 3 || len(lanes.Reservations) != 3 {
		t.Fatalf("activity on lanes: stock %d holders %v reservations %d, want 4, 3 and 3",
			lanes.Stock, lanes.Holders, len(lanes.Reservations))
	}
	if v, ok := s.Views[view.OrderID]; !ok || v != view {
		t.Fatalf("views %+v, want %+v", s.Views, view)
	}
}
