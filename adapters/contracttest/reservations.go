package contracttest

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ReservationsConfig is what the Reservations suite asks of the adapter it
// builds: the token bucket of Admission and the clock the bucket reads.
type ReservationsConfig struct {
	// RateCapacity is the per-user bucket size to configure.
	RateCapacity int
	// RefillPerSecond is the bucket's refill rate to configure.
	RefillPerSecond float64
	// Now is the clock the token bucket must read (the suite advances it).
	Now func() time.Time
}

// ReservationsSetup is the adapter under test: one Redis (or one in-memory
// stand-in) seen through its three ports.
type ReservationsSetup struct {
	Reservations ports.Reservations
	Admission    ports.Admission
	Backlog      ports.Backlog
	// StockLanes, when > 1, is the number of stock lanes of every activity
	// the suite seeds (ports.Activity.StockLanes): the whole suite then
	// runs on activity SKUs whose stock is split.
	StockLanes int
}

// ReservationsFactory builds a fresh, empty, isolated adapter (for Redis: a
// namespace of its own) configured as cfg says. It is called once per
// subtest and registers its own cleanup with t.
type ReservationsFactory func(t *testing.T, cfg ReservationsConfig) ReservationsSetup

// The token bucket the suite configures: 3 tokens, one more every 2s.
const (
	suiteRateCapacity    = 3
	suiteRefillPerSecond = 0.5
)

// Reservations runs the contract suite of ports.Admission,
// ports.Reservations and ports.Backlog:
//
//   - Admission: request claims (fresh, repeated with other ids, reused
//     for another activity or SKU), LookupOrder, the token bucket (a
//     repeat takes no token, refill on the clock, per user), concurrent
//     claims of one request_id;
//   - SeedActivity / Inventory: unknown SKU, seeding twice never resets;
//   - Reserve: window (checked against the snapshot's CreatedAt), unknown
//     activity, one holder per user, sold out, idempotent by reservation
//     id, Get; concurrent reserves never oversell and keep one holder per
//     user;
//   - status changes: MarkSent, MarkOrdered (PENDING or SENT only),
//     Release exactly once (stock + 1, user slot freed only while it
//     names the reservation), concurrent releases; ReleaseMany (mixed
//     batches over two activity SKUs, a reservation named twice or
//     released before, unknown reservations and reasons, stale releases,
//     overlapping concurrent batches: every unit back exactly once);
//   - ClaimDue: due times, leases (not due before the lease ends, then
//     claimable by another owner), send_attempt + 1, across activity
//     SKUs, limit, only PENDING, disjoint concurrent claims;
//     ScheduleRetry by the lease owner and by another owner;
//   - Backlog.Stats: counts and oldest creation times through the
//     reservation life cycle.
//
// Times of reservations are millisecond aligned, ClaimDue gets explicit
// times, and only the token bucket reads ReservationsConfig.Now.
func Reservations(t *testing.T, factory ReservationsFactory) {
	setup := func(t *testing.T) (ReservationsSetup, *suiteClock) {
		clock := &suiteClock{now: baseTime}
		s := factory(t, ReservationsConfig{
			RateCapacity: suiteRateCapacity, RefillPerSecond: suiteRefillPerSecond, Now: clock.Now,
		})
		if s.StockLanes > 1 {
			s.Reservations = lanedReservations{Reservations: s.Reservations, lanes: s.StockLanes}
		}
		return s, clock
	}
	t.Run("ClaimRequest", func(t *testing.T) { s, _ := setup(t); testClaimRequest(t, s.Admission) })
	t.Run("RateLimit", func(t *testing.T) { s, c := setup(t); testRateLimit(t, s.Admission, c) })
	t.Run("ForgetRequest", func(t *testing.T) { s, c := setup(t); testForgetRequest(t, s.Admission, c) })
	t.Run("ClaimRequestConcurrent", func(t *testing.T) { s, _ := setup(t); testClaimRequestConcurrent(t, s.Admission) })
	t.Run("SeedAndInventory", func(t *testing.T) { s, _ := setup(t); testSeed(t, s.Reservations) })
	t.Run("ReserveGuards", func(t *testing.T) { s, _ := setup(t); testReserveGuards(t, s.Reservations) })
	t.Run("ReserveConcurrent", func(t *testing.T) { s, _ := setup(t); testReserveConcurrent(t, s.Reservations) })
	t.Run("Lifecycle", func(t *testing.T) { s, _ := setup(t); testLifecycle(t, s.Reservations) })
	t.Run("ReleaseConcurrent", func(t *testing.T) { s, _ := setup(t); testReleaseConcurrent(t, s.Reservations) })
	t.Run("ClaimDueLeases", func(t *testing.T) { s, _ := setup(t); testClaimDueLeases(t, s.Reservations) })
	t.Run("ScheduleRetry", func(t *testing.T) { s, _ := setup(t); testScheduleRetry(t, s.Reservations) })
	t.Run("ClaimDueOnlyPending", func(t *testing.T) { s, _ := setup(t); testClaimDueOnlyPending(t, s.Reservations) })
	t.Run("ClaimDueLimitConcurrent", func(t *testing.T) { s, _ := setup(t); testClaimDueConcurrent(t, s.Reservations) })
	t.Run("Backlog", func(t *testing.T) { s, _ := setup(t); testBacklog(t, s.Reservations, s.Backlog) })
	t.Run("Unresolved", func(t *testing.T) { s, _ := setup(t); testUnresolved(t, s.Reservations) })
	t.Run("MarkSentBatch", func(t *testing.T) { s, _ := setup(t); testMarkSentBatch(t, s.Reservations) })
	t.Run("ReleaseMany", func(t *testing.T) { s, _ := setup(t); testReleaseMany(t, s.Reservations) })
	t.Run("ReleaseManyConcurrent", func(t *testing.T) { s, _ := setup(t); testReleaseManyConcurrent(t, s.Reservations) })
}

// lanedReservations seeds every activity with its number of stock lanes.
type lanedReservations struct {
	ports.Reservations
	lanes int
}

func (l lanedReservations) SeedActivity(ctx context.Context, a ports.Activity) error {
	if a.StockLanes == 0 {
		a.StockLanes = l.lanes
	}
	return l.Reservations.SeedActivity(ctx, a)
}

// seeded seeds an activity SKU with random ids open from baseTime for two
// hours.
func seeded(t *testing.T, rs ports.Reservations, stock int64) ports.Activity {
	t.Helper()
	a := testActivity(stock)
	noErr(t, "SeedActivity", rs.SeedActivity(t.Context(), a))
	return a
}

// newReservation builds a new PENDING reservation of userID created at
// createdAt.
func newReservation(t *testing.T, a ports.Activity, userID int64, createdAt time.Time) reservation.Snapshot {
	t.Helper()
	id := uniq()
	r, err := reservation.New(reservation.NewReservation{
		ReservationID: "rsv_" + id, OrderID: "ord_" + id, MessageID: "evt_" + id, RequestID: "req-" + id,
		ActivityID: a.ActivityID, SKUID: a.SKUID, UserID: userID, TTL: a.ReservationTTL,
	}, createdAt)
	noErr(t, "new reservation", err)
	return r.Snapshot()
}

func refOf(r reservation.Snapshot) ports.ReservationRef {
	return ports.ReservationRef{ActivityID: r.ActivityID, SKUID: r.SKUID, ReservationID: r.ReservationID}
}

// reserve stores a new reservation of userID created at createdAt, first
// due at due, and fails the test on error.
func reserve(t *testing.T, rs ports.Reservations, a ports.Activity, userID int64, createdAt, due time.Time) reservation.Snapshot {
	t.Helper()
	r := newReservation(t, a, userID, createdAt)
	got, err := rs.Reserve(t.Context(), r, due)
	noErr(t, "Reserve", err)
	return got
}

// status returns the stored status of r.
func status(t *testing.T, rs ports.Reservations, r reservation.Snapshot) reservation.Snapshot {
	t.Helper()
	got, err := rs.Get(t.Context(), refOf(r))
	noErr(t, "Get", err)
	return got
}

func wantStatus(t *testing.T, rs ports.Reservations, r reservation.Snapshot, want reservation.Status) {
	t.Helper()
	if got := status(t, rs, r); got.Status != want {
		t.Fatalf("reservation %s is %s, want %s", r.ReservationID, got.Status, want)
	}
}

// available returns the stock counter of a.
func available(t *testing.T, rs ports.Reservations, a ports.Activity) ports.RedisInventory {
	t.Helper()
	inv, err := rs.Inventory(t.Context(), a.ActivityID, a.SKUID)
	noErr(t, "Inventory", err)
	return inv
}
