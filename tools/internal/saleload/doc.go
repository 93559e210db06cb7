// Package saleload is the load generator of the sale benchmarks and the
// service it loads. A Load is a crowd of buyers placing orders through
// the service's public API (Connect JSON over HTTP/1.1 or h2c, or gRPC
// over h2c): each buyer is a user with a token of its own who makes its
// attempts one after another, reusing its first request id or not, and
// the Load records every answer (the count of each outcome, latencies,
// the accepted order ids and when each was first heard of, the buyers
// told two order ids, the retries whose answer changed). ServiceScratch
// and StartService prepare and start the service under load: one
// `seckill serve` subprocess on a scratch stack of its own.
//
// `seckill-bench sale` and `seckill-bench answers` use it. It talks to
// the service only through its public API and its operations listener,
// checks no invariant, and stops only the processes it started.
package saleload
