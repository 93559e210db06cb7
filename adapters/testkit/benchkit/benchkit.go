// Package benchkit holds the measurement loops that the benchmarks
// (tools/seckill-bench) and the adapters' go test benchmarks
// share. It works on the ports only, never on an adapter's internals, and
// like every package under adapters/testkit it is for tests and
// benchmarks only: no production package imports it.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// SendLoopResult summarises a SendLoop run.
type SendLoopResult struct {
	// Confirmed, Unknown and Rejected count the outcomes: a send that
	// returned no error, one whose error is neither nil nor
	// ports.ErrSendRejected (the outcome is unknown), and one rejected
	// definitely (ports.ErrSendRejected).
	Confirmed, Unknown, Rejected int
	// Elapsed is the wall time of the whole loop.
	Elapsed time.Duration
	// Latencies holds every send's duration, sorted ascending.
	Latencies []time.Duration
}

// Sent returns the number of sends attempted.
func (r SendLoopResult) Sent() int { return r.Confirmed + r.Unknown + r.Rejected }

// Rate returns confirmed sends per second.
func (r SendLoopResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Confirmed) / r.Elapsed.Seconds()
}

// Percentile returns the q-quantile (0..1) of the send latencies.
func (r SendLoopResult) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	return r.Latencies[max(0, min(i, len(r.Latencies)-1))]
}

// String formats the result for a benchmark report.
func (r SendLoopResult) String() string {
	return fmt.Sprintf("sent=%d confirmed=%d unknown=%d rejected=%d elapsed=%v rate=%.0f/s p50=%v p99=%v max=%v",
		r.Sent(), r.Confirmed, r.Unknown, r.Rejected, r.Elapsed.Round(time.Millisecond), r.Rate(),
		r.Percentile(0.50), r.Percentile(0.99), r.Percentile(1))
}

// SendLoop publishes n messages built by msg(i) with workers concurrent
// synchronous senders (each Publish bounded as the publisher bounds it)
// and reports the outcomes and latencies: the send ceiling of one
// publisher. It stops early when ctx ends and returns ctx's error with
// the partial result. All its goroutines end before it returns.
func SendLoop(ctx context.Context, pub ports.Publisher, n, workers int, msg func(i int) ports.OutboundMessage) (SendLoopResult, error) {
	if workers <= 0 || n < 0 {
		return SendLoopResult{}, errors.New("send loop: workers must be > 0 and n >= 0")
	}
	type outcome int
	const (
		confirmed outcome = iota
		unknown
		rejected
	)
	next := make(chan int)
	type result struct {
		lat     time.Duration
		outcome outcome
	}
	results := make(chan result, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				_, err := pub.Publish(ctx, msg(i))
				o := confirmed
				switch {
				case errors.Is(err, ports.ErrSendRejected):
					o = rejected
				case err != nil:
					o = unknown
				}
				results <- result{time.Since(start), o}
			}
		})
	}
	go func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()

	start := time.Now()
	var res SendLoopResult
	res.Latencies = make([]time.Duration, 0, n)
	for r := range results {
		res.Latencies = append(res.Latencies, r.lat)
		switch r.outcome {
		case confirmed:
			res.Confirmed++
		case rejected:
			res.Rejected++
		default:
			res.Unknown++
		}
	}
	res.Elapsed = time.Since(start)
	slices.Sort(res.Latencies)
	return res, ctx.Err()
}
