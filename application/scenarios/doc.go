// Package scenarios holds the application's scenario tests and nothing
// else: every use case wired together (placing, creating, paying, timing
// out and compensating orders, the relay, the scanner, the reconciler, the
// dead-letter replays and the admin actions) and driven step by step
// through failures, races and redeliveries, with the system's invariants
// (I1-I6) checked at rest.
//
// The tests run on the real PostgreSQL adapter, each on a freshly migrated
// clone of its own (adapters/testkit/pgtest), so they need the local stack
// (SECKILL_PG_DSN; `make test`, not `make unit`). Redis is the real Redis
// adapter on an in-process miniredis of each test's own
// (adapters/testkit/redismem); the broker, the clock, the ids, the
// failpoints and the metrics are the deterministic doubles of
// adapters/memory. Time only moves when a test advances the fake clock:
// the PostgreSQL store takes its "now" from that clock too
// (postgres.Config.Clock) and miniredis' clock follows it before every
// command, so payment timeouts, reservation TTLs, request claims and relay
// backoff are reached without waiting.
package scenarios
