package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Defaults of RedisConfig, equal to those of the real Redis adapter.
const (
	DefaultRateCapacity    = 5
	DefaultRefillPerSecond = 1.0
	DefaultRequestClaimTTL = 24 * time.Hour
)

// RateLimit configures the per-user token bucket of ClaimRequest.
type RateLimit struct {
	// Capacity is the bucket size; 0 means DefaultRateCapacity and a
	// negative value disables rate limiting.
	Capacity int
	// RefillPerSecond is the number of tokens added per second of the
	// injected clock; 0 means DefaultRefillPerSecond.
	RefillPerSecond float64
}

// RedisConfig configures a Redis. Clock is required; every other zero
// field takes its default.
type RedisConfig struct {
	// Clock drives the token bucket and the expiry of request claims.
	Clock ports.Clock
	// RateLimit is the per-user token bucket.
	RateLimit RateLimit
	// RequestClaimTTL is the claim lifetime used when ClaimRequest gets
	// ttl <= 0.
	RequestClaimTTL time.Duration
}

// Redis is the in-memory Redis: it implements ports.Admission,
// ports.Reservations and ports.Backlog, and OrderViews returns its
// ports.OrderViews. Every method is atomic (one mutex), as every Lua script
// of the real adapter is; reservation times are kept at millisecond
// precision, as the real adapter stores them. Reservation status changes
// are the commands of the reservation aggregate (reservation.Restore). Request claims expire ttl after
// they were made, measured on the injected clock. Safe for concurrent use.
type Redis struct {
	cfg    RedisConfig
	faults *faults

	mu      sync.Mutex
	slots   map[SKU]*rslot
	claims  map[requestKey]claimEntry
	lookups map[lookupKey]lookupEntry
	buckets map[int64]bucket
	views   map[string]ports.OrderView
}

// rslot is the state of one activity SKU.
type rslot struct {
	activity   ports.Activity
	stock      int64
	holders    map[int64]string // user -> reservation holding a unit
	rsv        map[string]*rsvEntry
	pending    map[string]struct{} // message not confirmed (PENDING)
	unresolved map[string]struct{} // neither ordered nor released
}

type rsvEntry struct {
	snap       reservation.Snapshot
	nextAt     time.Time
	leaseOwner string
	leaseUntil time.Time
}

type (
	requestKey struct {
		userID    int64
		requestID string
	}
	lookupKey struct {
		userID  int64
		orderID string
	}
	claimEntry struct {
		claim     ports.RequestClaim
		expiresAt time.Time
	}
	lookupEntry struct {
		ref       ports.ReservationRef
		expiresAt time.Time
	}
	bucket struct {
		tokens float64
		ms     int64
	}
)

var (
	_ ports.Admission    = (*Redis)(nil)
	_ ports.Reservations = (*Redis)(nil)
	_ ports.Backlog      = (*Redis)(nil)
)

// Method names accepted by Redis.Inject and Redis.FailOn: the Go names of
// the methods of ports.Admission, ports.Reservations and ports.Backlog,
// plus "ViewApply" and "ViewGet" for the order views.
var redisMethods = []string{
	"ClaimRequest", "ForgetRequest", "BuyerState", "LookupOrder", "SeedActivity", "Reserve", "Get", "MarkSent",
	"ScheduleRetry", "Release", "ReleaseMany", "MarkOrdered", "ClaimDue", "Inventory", "Stats",
	"ViewApply", "ViewGet",
}

// NewRedis returns an empty Redis. A nil cfg.Clock panics.
func NewRedis(cfg RedisConfig) *Redis {
	if cfg.Clock == nil {
		panic("memory.NewRedis: nil clock")
	}
	if cfg.RateLimit.Capacity == 0 {
		cfg.RateLimit.Capacity = DefaultRateCapacity
	}
	if cfg.RateLimit.RefillPerSecond <= 0 {
		cfg.RateLimit.RefillPerSecond = DefaultRefillPerSecond
	}
	if cfg.RequestClaimTTL <= 0 {
		cfg.RequestClaimTTL = DefaultRequestClaimTTL
	}
	return &Redis{
		cfg:     cfg,
		faults:  newFaults("redis", redisMethods...),
		slots:   map[SKU]*rslot{},
		claims:  map[requestKey]claimEntry{},
		lookups: map[lookupKey]lookupEntry{},
		buckets: map[int64]bucket{},
		views:   map[string]ports.OrderView{},
	}
}

// Inject arms a fault on one of the methods (test facility; see
// redisMethods for the names). A Fault with a nil Err disarms the method;
// unknown names panic.
func (r *Redis) Inject(method string, f Fault) { r.faults.set(method, f) }

// FailOn makes every call of method fail with err, before taking effect,
// until cleared (test facility). A nil err clears it.
func (r *Redis) FailOn(method string, err error) { r.Inject(method, Fault{Err: err}) }

// ClearFaults disarms every injected fault (test facility).
func (r *Redis) ClearFaults() { r.faults.clear() }

// enter starts an atomic call of method: it checks ctx, applies an
// injected fault and locks r. On success the caller must unlock r.mu and
// return after (the error of an AfterEffect fault) once the call took
// effect.
func (r *Redis) enter(ctx context.Context, method string) (after error, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory redis %s: %w", method, err)
	}
	before, after := r.faults.hit(method)
	if before != nil {
		return nil, before
	}
	r.mu.Lock()
	return after, nil
}

// msTime truncates t to the millisecond precision of the real adapter, in
// UTC; the zero time stays zero.
func msTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// ReservationState is a stored reservation with its scanner fields.
type ReservationState struct {
	Snapshot reservation.Snapshot
	// NextAttemptAt is the pending index's due time (meaningful while
	// PENDING).
	NextAttemptAt time.Time
	LeaseOwner    string
	LeaseUntil    time.Time
}

// SlotState is the state of one seeded activity SKU.
type SlotState struct {
	Activity ports.Activity
	Stock    int64
	// Holders maps user ids to the reservation holding their unit.
	Holders map[int64]string
	// Reservations are sorted by creation time, then id.
	Reservations []ReservationState
}

// RedisSnapshot is a copy of a Redis' state, for test assertions.
type RedisSnapshot struct {
	Slots map[SKU]SlotState
	Views map[string]ports.OrderView
}

// Snapshot returns a copy of the whole state (test facility).
func (r *Redis) Snapshot() RedisSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	snap := RedisSnapshot{Slots: map[SKU]SlotState{}, Views: maps.Clone(r.views)}
	for k, s := range r.slots {
		st := SlotState{Activity: s.activity, Stock: s.stock, Holders: maps.Clone(s.holders)}
		for _, e := range s.rsv {
			st.Reservations = append(st.Reservations, ReservationState{
				Snapshot: e.snap, NextAttemptAt: e.nextAt, LeaseOwner: e.leaseOwner, LeaseUntil: e.leaseUntil,
			})
		}
		slices.SortFunc(st.Reservations, func(a, b ReservationState) int {
			return cmp.Or(a.Snapshot.CreatedAt.Compare(b.Snapshot.CreatedAt),
				cmp.Compare(a.Snapshot.ReservationID, b.Snapshot.ReservationID))
		})
		snap.Slots[k] = st
	}
	return snap
}
