// Package benchtimeouts is `seckill-bench timeouts`: the payment-timeout
// wave. It sells units through an in-process service on a scratch stack
// (Connect API, every worker running) with a short payment timeout, lets
// every order expire unpaid and reports how late the orders were canceled
// and the stock released, with the wave's invariants, beside the
// PostgreSQL ceiling of the cancel transactions measured in the same run.
//
// Run is the command; nothing else is exported.
package benchtimeouts
