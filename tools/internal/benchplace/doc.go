// Package benchplace is `seckill-bench place`: PlaceOrder through the
// Connect API of an in-process service on a scratch stack, at several
// client counts, beside three ceilings measured in the same run (the
// reserve script alone, a bare synchronous send loop, a naive PostgreSQL
// row-lock purchase), and, with --beside, a running service's latency
// before and during the first level.
//
// Run is the command. Level, one closed-loop level of PlaceOrder calls
// from new buyers, is also what `seckill-bench events` measures the sale
// with beside live subscribers.
package benchplace
