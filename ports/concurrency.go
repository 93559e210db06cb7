package ports

import (
	"context"
	"time"
)

// ConcurrencyLimit is an adaptive bound on a consumer group's concurrent
// handler calls (spec 22: consumer throughput follows what PostgreSQL can
// take). A consumer runner asks Limit before each receive and starts one
// only while fewer handler calls than Limit are in flight (its own fixed
// concurrency stays the hard cap), and reports every finished handler call
// with Observe. The implementation adjusts the limit from the samples and
// from whatever other signals it is given; the runner knows nothing of how.
//
// Contract: Limit is never above the budget the implementation was given
// and never below its floor, which is at least 1, so a group always makes
// progress. Both methods are safe for concurrent use, never block and
// never fail. The interface is broker-neutral.
type ConcurrencyLimit interface {
	// Limit returns the number of handler calls that may run at once now.
	Limit() int
	// Observe reports one finished handler call (a batch).
	Observe(BatchSample)
}

// BatchSample describes one finished handler call for a ConcurrencyLimit.
type BatchSample struct {
	// Messages is the number of deliveries in the batch.
	Messages int
	// Duration is how long the handler call took.
	Duration time.Duration
	// TxLatency is the longest Decision.TxLatency of the batch: the
	// handler's own transaction latency; zero when the handler reports
	// none.
	TxLatency time.Duration
	// Transient reports that at least one decision of the batch left its
	// message unacknowledged (a transient error, a timeout, a canceled or
	// conflicting transaction, a panicking handler): the work did not
	// commit and will be redelivered.
	Transient bool
	// PoolWait is how long the handler waited for a database connection;
	// zero when unknown.
	PoolWait time.Duration
	// InFlight is the number of handler calls of the group that were
	// running when this one started, this one included.
	InFlight int
}

// ConsumerPeers is the registry of the live instances that share one
// consumer concurrency budget (spec 22.1: the budget is the deployment's,
// not each instance's). Every instance running adaptive consumers
// heartbeats into it once per decision tick and takes its share of the
// global budget from the count it gets back, so adding worker instances
// does not multiply the load on PostgreSQL.
//
// Contract: liveness is judged on the registry's own clock, never on the
// instances' (their clocks may disagree). An instance is live from its
// heartbeat until ttl after it; a heartbeat forgets every instance whose
// last heartbeat is older than the ttl it carries. The count includes the
// caller, so it is at least 1 on success. Both methods are bounded by ctx
// and safe for concurrent use.
type ConsumerPeers interface {
	// Heartbeat records instance as live now and returns the number of
	// live instances, this one included.
	Heartbeat(ctx context.Context, instance string, ttl time.Duration) (int, error)
	// Leave removes instance at once (a clean shutdown), so the others
	// take its share at their next tick instead of after its ttl.
	Leave(ctx context.Context, instance string) error
}
