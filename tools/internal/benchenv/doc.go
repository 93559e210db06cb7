// Package benchenv is the ground a run of seckill-bench stands on: the
// scratch stack of one run (Scratch: a broker namespace through the
// chosen broker's plug, a migrated PostgreSQL database and a leased Redis
// logical database, all removed by Close), the service as a process of
// the run (Instance: one `seckill serve` on free loopback ports, started,
// signalled and stopped by pid) or in process (StartInProcess), the local
// stack's processes (their pid files, the broker's processes of a plug's
// dev stack or cluster mode), a redis-server of a run's own
// (PrivateRedis), the CPU of processes over a measured run (CPUMeter),
// the sale's HTTP client parts and the books a sale is checked against
// (ReadSaleBooks).
//
// It measures and checks nothing on its own: the commands of
// seckill-bench (place, consume, sale, chaos, cluster-sale, ...) do, on
// what it builds. It starts and stops only processes it started itself,
// and faults a stack process only by the pid its pid file holds.
package benchenv
