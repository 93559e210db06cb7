// Package concurrency is the backlog governance of spec 22: each consumer
// group's concurrency follows what PostgreSQL can take instead of a fixed
// 70 % of the pool (issue 29).
//
// # Pieces
//
// Decide (Policy.Decide) is the decision table of spec 22.2 as a pure
// function of Signals: the broker's lag and its trend, PostgreSQL's
// transaction latency against its recent floor, pool waits and
// exhaustion, lock waits, the transient error rate, WAL or disk
// saturation, the reservations' deadline and the last broker recovery.
// Every row is a named Action with the Reason (signal) that chose it:
//
//	lag high, PG healthy                        ActionGrow            grow additively
//	lag high, pool exhausted                    ActionShrinkPool      do not grow, shrink
//	lag high, WAL or disk saturated             ActionLimitAdmission  hold, throttle the entry
//	lag low, PG under pressure                  ActionShrinkLowLag    shrink, smaller batches
//	lag jumps just after a broker recovery      ActionRampUp          slow start from the floor
//	lag high, deadline near, PG without room    ActionFailClosed      shrink, admission closed
//
// and two actions outside the table: ActionShrink (lag high, pressure
// other than the pool or WAL: latency above k × its floor, lock waits,
// errors, pool waits) and ActionHold (lag low, PostgreSQL healthy). Rows
// protecting PostgreSQL win over rows adding load (see Policy.Decide for
// the order).
//
// Limiter is one group's limit, an AIMD limiter in the manner of Netflix's
// concurrency-limits (AIMD, Gradient2) and TCP Vegas: additive increase
// while lag is high and PostgreSQL healthy, and only when the limit bound
// (in-flight calls reached it); multiplicative decrease when the pool
// waits, latency climbs above k × its recent floor (Vegas' base RTT: the
// minimum over a window of ticks, kept per batch-size class so fuller
// batches are not read as pressure) or transient errors appear; after a
// broker recovery a slow start from the floor, one RampStep per tick, so
// the recovered backlog does not flood PostgreSQL. A shrink on latency,
// lock waits or pool waits, with the backlog high or low, is a probe, as
// in a gradient limiter: it stands only if the messages committed per
// tick over the next ProbeTicks keep 0.9x those before it; otherwise it
// is undone and those signals are held for ProbeHold ticks (reason
// throughput), since a PostgreSQL slowed by something concurrency does
// not cause serves more with more transactions in flight, while one slowed
// by contention (a hot lock) commits as much with fewer. An upward probe
// does the same the other way round: with the backlog high and soft
// pressure, a limit at its floor or whose shrinks are held tries one
// growth step and keeps it only if the throughput follows. The limit
// never leaves [Floor, ceiling]. It implements ports.ConcurrencyLimit: the consumer
// runner reads Limit before each receive and reports each batch with
// Observe (latency, transient decisions, in-flight calls); the latency,
// error and in-flight signals come from these samples, the others from
// the caller. There is no goroutine inside and time comes from the
// injected clock: the caller ticks it (every second, say), which makes
// tests exact.
//
// Budget shares one process's consumer budget between its groups (spec
// 21.2 step 4): when the order-create group's reservations near their
// deadline, the projection, audit and event groups yield to their floor
// and the order-create group may use what they freed; they get their
// budget back when the urgency ends. The sum of the ceilings never
// exceeds the sum of the budgets.
//
// # Admission
//
// Decision.Admission is what the entry should do: AdmissionThrottle for
// WAL or disk saturation, AdmissionClosed for the fail-closed row. The
// BacklogGate (application.BacklogGate) already closes PlaceOrder when the
// oldest unresolved reservation is older than its ratio × TTL; the
// fail-closed row reads the same measurement (Signals.ReservationDeadline
// is that reservation's time plus ratio × TTL), so both close on one
// signal and the controller adds only "and PostgreSQL has no headroom".
//
// # Metrics
//
// Limiter.State and Budget.States give, per group, the current limit (the
// gauge consumer_concurrency_limit{group}), the last decision with its
// reason and the count of decisions by reason
// (consumer_concurrency_decisions_total{group,reason}); the owner of the
// wiring exports them, as the prometheus adapter exports other state at
// scrape time.
//
// # Across instances
//
// Spec 22.1 divides one PostgreSQL budget between instances (168 over 12:
// 14 each). Budget.SetShare scales every ceiling by the instance's share;
// the caller derives it from the global budget and the live worker
// instances (application.ConsumerLimits: a fixed share per live instance,
// counted through ports.ConsumerPeers), so adding instances does not
// multiply the load on PostgreSQL. That registry is not part of this
// package.
package concurrency
