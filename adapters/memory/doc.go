// Package memory holds the deterministic test doubles of the driven ports
// that keep application tests fast: the broker, the clock, the ids, the
// failpoints and the metrics. They are faithful to the documented port
// contracts (idempotency, guards, sentinel errors) and safe for concurrent
// use, but they are never a substitute for the adapter tests of the real
// adapters: the shared suites of package adapters/contracttest run against
// both.
//
// PostgreSQL and Redis have no double here: application tests that need
// storage (application/scenarios) run on the real PostgreSQL adapter, on a
// clone of the migrated schema (adapters/testkit/pgtest), and on the real
// Redis adapter, whose Lua scripts are the one home of the reservation
// rules, on an in-process miniredis (adapters/testkit/redismem), with these
// doubles around them.
//
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
