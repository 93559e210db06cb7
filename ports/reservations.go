package ports

import (
	"context"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
)

// Activity is a flash sale of one SKU: its stock and time rules.
type Activity struct {
	ActivityID     int64
	SKUID          int64
	Stock          int64
	StartsAt       time.Time
	EndsAt         time.Time
	PaymentTimeout time.Duration
	ReservationTTL time.Duration
	// StockLanes is the number of Redis slots the entry's stock is split
	// over, 1..MaxStockLanes (0 reads as 1). One slot serves every
	// reservation of a SKU on one Redis core; lanes spread a hot SKU over
	// several slots (each buyer reserves in the lane his user id maps to,
	// and stock moves between lanes when one runs dry). Fixed at creation.
	StockLanes int
	// UnitPrice is the price of one unit in minor units of Currency (for
	// example cents), >= 0; 0 means the activity is not priced. Every
	// order of the activity records it in its ORDER_CREATED event. Fixed
	// at creation.
	UnitPrice int64
	// Currency is the ISO 4217 code of UnitPrice, three upper-case
	// letters; required when UnitPrice > 0, empty when it is 0.
	Currency string
	// Paused is set while an operator has paused the sale
	// (ActivityOperations.PauseActivity): the entry refuses with
	// ErrActivityPaused. State, not a setting: CreateActivity ignores it.
	Paused bool
	// ClosedAt is when an operator closed the sale (zero: not closed);
	// EndsAt was moved to it. State, not a setting: CreateActivity
	// ignores it.
	ClosedAt time.Time
}

// MaxStockLanes bounds Activity.StockLanes.
const MaxStockLanes = 16

// Lanes returns StockLanes with 0 read as 1.
func (a Activity) Lanes() int {
	if a.StockLanes <= 0 {
		return 1
	}
	return a.StockLanes
}

// ValidateSlot checks what a stock slot needs: positive ids, stock >= 0 and
// a window that ends after it starts. It returns a *FieldError naming the
// first invalid field, or nil.
func (a Activity) ValidateSlot() error {
	switch {
	case a.ActivityID <= 0:
		return InvalidField("activity_id", "must be > 0")
	case a.SKUID <= 0:
		return InvalidField("sku_id", "must be > 0")
	case a.Stock < 0:
		return InvalidField("stock", "must be >= 0")
	case !a.EndsAt.After(a.StartsAt):
		return InvalidField("ends_at", "must be after starts_at")
	case a.StockLanes < 0 || a.StockLanes > MaxStockLanes:
		return InvalidField("stock_lanes", "must be between 1 and %d (0 means 1)", MaxStockLanes)
	}
	return nil
}

// Validate checks every field: ValidateSlot, then a payment timeout and a
// reservation TTL of at least a microsecond, then the price (UnitPrice >=
// 0, Currency an ISO 4217 code when UnitPrice > 0 and empty when it is 0).
// It returns a *FieldError naming the first invalid field, or nil.
func (a Activity) Validate() error {
	switch err := a.ValidateSlot(); {
	case err != nil:
		return err
	case a.PaymentTimeout < time.Microsecond:
		return InvalidField("payment_timeout", "must be > 0")
	case a.ReservationTTL < time.Microsecond:
		return InvalidField("reservation_ttl", "must be > 0")
	case a.UnitPrice < 0:
		return InvalidField("unit_price", "must be >= 0")
	case a.UnitPrice > 0 && !order.IsCurrency(a.Currency):
		return InvalidField("currency", "must be an ISO 4217 code of three upper-case letters when unit_price > 0")
	case a.UnitPrice == 0 && a.Currency != "":
		return InvalidField("currency", "must be empty when unit_price is 0")
	}
	return nil
}

// ReservationRef addresses a reservation. ActivityID and SKUID locate its
// Redis slot (all keys of one activity SKU share a hash tag).
type ReservationRef struct {
	ActivityID    int64
	SKUID         int64
	ReservationID string
	// UserID is optional. It finds the stock lane of the reservation
	// directly (Activity.StockLanes; without it the lanes are probed), and
	// MarkOrdered uses it to adopt an order whose reservation Redis lost
	// (StockBooks).
	UserID int64
}

// ReleaseRequest asks ReleaseMany to release one reservation for Reason.
type ReleaseRequest struct {
	Ref    ReservationRef
	Reason reservation.ReleaseReason
}

// ReleaseResult is the outcome of one ReleaseRequest.
type ReleaseResult struct {
	// Released reports whether this call released the reservation: false
	// when it was RELEASED already (a repeated release is a no-op) or when
	// Err is set.
	Released bool
	// Err is nil when the reservation is released (by this call or an
	// earlier one); otherwise it says why the request was not applied or
	// its outcome is unknown (see ReleaseMany).
	Err error
}

// RequestClaim binds a client's request_id to the ids of the reservation
// it creates. The ids are generated once, before anything is stored, and
// never regenerated.
type RequestClaim struct {
	UserID        int64
	RequestID     string
	ActivityID    int64
	SKUID         int64
	ReservationID string
	OrderID       string
	MessageID     string
}

// Admission guards the entry of PlaceOrder per user (Redis, user slot).
type Admission interface {
	// ClaimRequest binds (claim.UserID, claim.RequestID) to claim for ttl,
	// or returns the claim bound earlier with existing = true. A repeated
	// request consumes no rate-limit token; a fresh one first takes a token
	// from the user's bucket and fails with ErrRateLimited when it is
	// empty. A request_id bound to another activity or SKU fails with
	// ErrRequestIDReused. Atomic: concurrent calls with the same request_id
	// all return the same ids. Claims expire after ttl of wall time.
	ClaimRequest(ctx context.Context, claim RequestClaim, ttl time.Duration) (bound RequestClaim, existing bool, err error)
	// ForgetRequest is called when the request bound to claim reserved
	// nothing (sold out, already purchased, closed, refused): when
	// (userID, requestID) is still bound to claim.ReservationID, the claim
	// and its order lookup expire within ttl (never later than they
	// would have), so a request that reserves nothing leaves no long-lived
	// key behind. Otherwise it changes nothing. Idempotent.
	ForgetRequest(ctx context.Context, userID int64, requestID string, claim RequestClaim, ttl time.Duration) error
	// BuyerState looks, read-only (no rate-limit token, nothing written),
	// at what a buyer already has before any reservation work: whether
	// (userID, requestID) is bound to an unexpired claim and whether the
	// user holds a unit of the activity SKU.
	BuyerState(ctx context.Context, userID int64, requestID string, activityID, skuID int64) (BuyerState, error)
	// LookupOrder returns the reservation behind one of userID's order ids,
	// as bound by ClaimRequest (the ref carries userID). ErrNotFound when
	// there is none.
	LookupOrder(ctx context.Context, userID int64, orderID string) (ReservationRef, error)
}

// BuyerState is what Admission.BuyerState finds.
type BuyerState struct {
	// RequestBound: the request was claimed before (it may have reserved).
	RequestBound bool
	// HoldsUnit: the user holds a unit of the SKU (a reservation or order).
	HoldsUnit bool
}

// RedisInventory is the Redis side of one activity SKU's stock.
type RedisInventory struct {
	// Available is the stock counter; never negative.
	Available int64
	// Held are the ids of reservations that hold a unit (not RELEASED).
	Held []string
}

// Reservations is the Redis reservation store. Every state change is one
// atomic Lua script guarded by the reservation's current status (the rules
// of reservation.CanTransition), so concurrent and repeated calls are safe.
type Reservations interface {
	// SeedActivity creates the activity SKU's stock counter and rules if
	// absent and registers its slot for the scanner and monitors. It never
	// resets an existing counter; seeding twice is a no-op.
	SeedActivity(ctx context.Context, a Activity) error

	// Reserve atomically checks, in this order: that the activity SKU is
	// seeded (ErrActivityNotFound), that r.CreatedAt is before ends_at
	// (ErrActivityEnded; ends_at as last set by ActivitySwitch.SetEndsAt)
	// and not before starts_at (a *NotStartedError, which matches
	// ErrActivityNotStarted), that no operator paused the sale
	// (ErrActivityPaused, ActivitySwitch.SetPaused), one holder per user
	// (a *HolderError, which matches ErrAlreadyPurchased) and stock > 0
	// (ErrSoldOut); then it decrements the stock, stores r (status
	// PENDING) and indexes it as pending send, first due at
	// firstAttemptAt. When a reservation with r's id exists it changes
	// nothing and returns the stored one. (A slot frozen for verification
	// answers ErrStockPaused before any of these: see StockBooks.)
	Reserve(ctx context.Context, r reservation.Snapshot, firstAttemptAt time.Time) (reservation.Snapshot, error)

	// Get returns a stored reservation or ErrNotFound.
	Get(ctx context.Context, ref ReservationRef) (reservation.Snapshot, error)

	// MarkSent records the broker's confirmation: PENDING -> SENT and the
	// reservation leaves the pending index. A no-op in any later status;
	// ErrNotFound for an unknown reservation.
	MarkSent(ctx context.Context, ref ReservationRef) error

	// MarkSentBatch is MarkSent for many reservations at once (one round
	// trip per activity SKU); unknown reservations are skipped.
	MarkSentBatch(ctx context.Context, refs []ReservationRef) error

	// ScheduleRetry records an unknown send outcome: the reservation stays
	// PENDING, its lease is dropped if held by owner, and it is due again
	// at next (or, when another owner holds an active lease, at the later
	// of next and that lease's end). A no-op when the reservation is no
	// longer PENDING; ErrNotFound for an unknown reservation.
	ScheduleRetry(ctx context.Context, ref ReservationRef, owner string, next time.Time) error

	// Release gives the reservation's unit back exactly once: stock + 1,
	// the user's slot freed (only if it still points at this reservation),
	// status RELEASED with reason, removed from every index. It reports
	// whether this call released it; releasing again returns false (I4).
	// ErrNotFound when the reservation is unknown.
	Release(ctx context.Context, ref ReservationRef, reason reservation.ReleaseReason) (bool, error)

	// ReleaseMany is Release for a batch: it gives each requested
	// reservation's unit back at most once (I4) with the same guard and
	// effects as Release, in one atomic round trip per activity SKU (all
	// keys of one activity SKU share a Redis Cluster slot), and returns one
	// result per request, results[i] for reqs[i]. Requests of one activity
	// SKU are applied in input order, so a reservation named twice is
	// released by its first request and the later one reports false.
	// A request for an unknown reservation gets an error matching
	// ErrNotFound, one with an unknown reason an error matching
	// reservation.ErrInvalid; neither affects the other requests. When
	// the round trip of an activity SKU fails, each of its requests carries
	// that error and its outcome is unknown (asking again is safe: a
	// released reservation is never released twice). An empty reqs returns
	// no results.
	ReleaseMany(ctx context.Context, reqs []ReleaseRequest) []ReleaseResult

	// MarkOrdered records that PostgreSQL created the orders:
	// PENDING/SENT -> ORDERED, removed from the pending and unresolved
	// indexes. Best effort write-back; unknown or released ones are
	// skipped.
	MarkOrdered(ctx context.Context, refs []ReservationRef) error

	// ClaimDue leases up to limit PENDING reservations whose next attempt
	// is due at now, across all seeded activity SKUs: lease_owner = owner,
	// lease_until = now + lease, send_attempt + 1. A reservation whose lease
	// expired may be claimed by another owner. Claimed reservations are not
	// due again before the lease ends.
	ClaimDue(ctx context.Context, now time.Time, limit int, owner string, lease time.Duration) ([]reservation.Snapshot, error)

	// Inventory returns the stock counter and held reservations of one
	// activity SKU (ErrNotFound if not seeded).
	Inventory(ctx context.Context, activityID, skuID int64) (RedisInventory, error)

	// Unresolved returns up to limit reservations, across all seeded
	// activity SKUs, that are neither ordered nor released and were created
	// before createdBefore, oldest first (for the reconciler).
	Unresolved(ctx context.Context, createdBefore time.Time, limit int) ([]reservation.Snapshot, error)
}

// BacklogStats describes the order-create backlog as seen from Redis.
type BacklogStats struct {
	// Unresolved counts reservations with neither an order nor a release.
	Unresolved int64
	// OldestUnresolvedAt is the creation time of the oldest of them; zero
	// when there is none.
	OldestUnresolvedAt time.Time
	// ShortestUnresolvedTTL is the shortest reservation validity (the
	// activity's ReservationTTL) among the activity SKUs that hold an
	// unresolved reservation; zero when there is none. With
	// OldestUnresolvedAt it bounds from below when the first unresolved
	// reservation reaches a share of its validity (the backlog gate's
	// deadline), whichever SKU holds it.
	ShortestUnresolvedTTL time.Duration
	// PendingSend counts reservations whose message is not yet confirmed.
	PendingSend int64
	// OldestPendingSendAt is the creation time of the oldest of them.
	OldestPendingSendAt time.Time
}

// Backlog measures the backlog across all seeded activity SKUs.
type Backlog interface {
	// Stats returns the current backlog statistics.
	Stats(ctx context.Context) (BacklogStats, error)
}

// OrderViews is the Redis query view of orders (one hash per order),
// maintained by the FIFO projection.
type OrderViews interface {
	// Apply stores v if its AggregateVersion is newer than the stored one
	// (atomic compare in Redis) and reports whether it did.
	Apply(ctx context.Context, v OrderView) (bool, error)
	// Get returns the stored view or ErrNotFound.
	Get(ctx context.Context, orderID string) (OrderView, error)
}
