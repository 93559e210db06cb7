// Package chaos is `seckill-bench chaos` and `seckill-bench chaos soak`.
//
// Run sells one activity per scenario on two `seckill serve` processes
// while one fault is injected mid-sale (a stack process or a service
// instance killed or paused, the services' connections to Redis or
// PostgreSQL delayed, black-holed or reset, consumers that crash between
// receive and acknowledge, Redis restored from an older copy, a
// PostgreSQL or Redis Cluster failover), then checks every buyer's
// answers and the books at rest against the invariants (I1-I7) and prints
// one row per scenario; it fails when an invariant column is not 0.
//
// Soak runs sales back to back for a duration under faults at intervals,
// samples the processes' resources, and writes result.json and
// report.html with each activity's verdict, each fault's recovery and the
// resource trends.
//
// Both kill, pause and restart only processes the local stack or the run
// itself started, by the pid their pid files hold.
package chaos
