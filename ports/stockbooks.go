package ports

import (
	"context"

	"github.com/seckill-dev/seckill/domain/reservation"
)

// StockBooks verifies the Redis stock books after Redis came back as a
// different process: a restart, a restore from a snapshot or a failover to
// a replica may hold less than the process that acknowledged reservations
// (AOF everysec loses up to a second; an older snapshot loses more). A
// stock counter that went back in time would let the entry accept more
// reservations than PostgreSQL can turn into orders.
//
// Contract:
//   - The adapter detects a new Redis process before any command runs on it
//     (it checks every new connection). On detection every activity SKU the
//     process holds is frozen (Reserve answers ErrStockPaused, every other
//     operation goes on, so in-flight work keeps draining) and recovery is
//     pending for that process's generation.
//   - RecoveryPending returns the generation awaiting recovery, "" when the
//     books are verified.
//   - InFlight returns the activity SKU's reservations that are neither
//     ORDERED nor RELEASED in Redis (the ones only Redis and the broker
//     know about). For an activity SKU whose stock is split over several
//     lanes (Activity.StockLanes) of which one is frozen by generation or
//     lost, it first freezes every lane by generation, so that no lane
//     sells between this read and Rebuild.
//   - Rebuild writes the activity SKU's books from rebuild facts read from
//     PostgreSQL after InFlight, then unfreezes it, in one atomic step;
//     see StockRebuild for how each term is used. It refuses (ErrStockPaused)
//     an activity SKU that exists and is not frozen by the facts'
//     generation (with lanes: any lane); a never-seeded one is seeded.
//   - FinishRecovery marks generation verified when it is still the pending
//     one and reports whether it did; a newer pending generation (Redis
//     changed again during recovery) stays pending.
//   - After a rebuild, an order created for a reservation Redis lost (its
//     message was in the broker) is adopted by MarkOrdered when the ref
//     carries the user: its unit is taken from the counter (or counted as
//     overdraft when none is left) and its user becomes the holder.
type StockBooks interface {
	RecoveryPending(ctx context.Context) (generation string, err error)
	InFlight(ctx context.Context, generation string, a Activity) ([]reservation.Snapshot, error)
	Rebuild(ctx context.Context, r StockRebuild) (RebuildResult, error)
	FinishRecovery(ctx context.Context, generation string) (bool, error)
}

// StockRebuild are the facts one activity SKU's books are rebuilt from.
type StockRebuild struct {
	// Generation is the pending generation the facts were read for.
	Generation string
	// Activity seeds the rules when Redis lost them.
	Activity Activity
	// Base is the initial stock minus PostgreSQL's non-canceled orders.
	Base int64
	// InFlight are the ids InFlight returned that PostgreSQL has not
	// decided; each still not RELEASED when the rebuild runs holds a unit
	// (it may have become ORDERED since PostgreSQL was read).
	InFlight []string
	// Ordered are ids InFlight returned that PostgreSQL made orders of
	// (marked ORDERED, no stock change); Released are those PostgreSQL
	// rejected or canceled (marked RELEASED without giving a unit back:
	// Base already counts it).
	Ordered, Released []string
	// Holders are the users of PostgreSQL's non-canceled orders.
	Holders []Holder
}

// Holder is a user holding one unit of an activity SKU through a
// reservation.
type Holder struct {
	UserID        int64
	ReservationID string
}

// RebuildResult is what a rebuild wrote: the available units, the units
// held by in-flight reservations and the overdraft (units in flight beyond
// what PostgreSQL has left; 0 unless Redis acknowledged more than stock).
type RebuildResult struct {
	Available, InFlight, Overdraft int64
}
