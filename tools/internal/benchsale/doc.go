// Package benchsale is `seckill-bench sale`: a whole sale against one
// `seckill serve` subprocess on a scratch stack. Buyers arrive (all at
// once or over a ramp) and place orders through the public API
// (saleload) while a sampler records answer rates, committed orders, the
// backlog, the outbox, latency and the CPU of every process; once the
// backlog and the outbox drained it checks the invariants, measures the
// reserve-script and bare-send ceilings, and writes result.json and a
// self-contained report.html.
//
// Run is the command; Result (with Options, Sample, Summary and
// Ceilings) is what result.json holds.
package benchsale
