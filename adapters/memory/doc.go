// Package memory holds the deterministic test doubles of the driven ports
// that keep application tests fast: Redis, the broker, the clock, the ids,
// the failpoints and the metrics. They are faithful to the documented port
// contracts (idempotency, guards, sentinel errors) and safe for concurrent
// use, but they are never a substitute for the adapter tests of the real
// Redis and RocketMQ adapters: the shared suites of package
// adapters/contracttest run against both.
//
// There is no in-memory PostgreSQL: application tests that need storage
// (application/scenarios) run on the real adapter, on a clone of the
// migrated schema (adapters/testkit/pgtest), with these doubles around it.
//
//   - Redis implements ports.Admission, ports.Reservations and
//     ports.Backlog; Redis.OrderViews returns the ports.OrderViews
//     implementation.
//   - Broker implements ports.Publisher and delivers stored messages to a
//     ports.BatchHandler on demand (Deliver, Drain).
//   - Clock, IDs, Failpoints and Metrics implement ports.Clock,
//     ports.IDGenerator, ports.Failpoints and ports.Metrics.
//   - EventLog implements ports.EventLog and ports.EventSubscriptions (the
//     sequenced order-event log and its catch-up subscription) for the
//     API's stream tests; its idle checkpoints follow the wall clock.
//
// Time comes from an injected ports.Clock (usually *Clock, a settable fake
// clock), never from the wall clock, so tests are deterministic. Nothing in
// this package starts a goroutine.
//
// Test facilities (fault injection, inspection) are exported methods whose
// doc comments say so; production code never calls them.
package memory
