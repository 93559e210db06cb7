package benchsale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/adapters/testkit/pgpair"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/procstat"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// saleProcesses lists the processes to measure: the service, this
// process (the load generator and sampler), the broker's processes
// (display name and absolute pid file path; no file: not the broker in
// use) and the local stack's Redis and PostgreSQL (found in
// $SECKILL_STACK_DIR/run). The note says which could not be measured.
func saleProcesses(servicePID int, broker [][2]string) ([]*benchenv.SampledProcess, string) {
	procs := []*benchenv.SampledProcess{{Name: "service", PID: servicePID}, {Name: "load generator", PID: os.Getpid()}}
	var missing []string
	for _, c := range append(slices.Clone(broker), [2]string{"redis", "redis"}, [2]string{"postgres", "postgres"}) {
		name, file := c[0], c[1]
		if file == "" {
			missing = append(missing, name)
			continue
		}
		var pid int
		var err error
		if filepath.IsAbs(file) { // a broker's process (devstack.BrokerProcesses gives absolute paths)
			pid, err = benchenv.PIDFromFile(file)
		} else {
			pid, err = benchenv.StackPID(file)
		}
		if err != nil {
			missing = append(missing, name)
			continue
		}
		procs = append(procs, &benchenv.SampledProcess{Name: name, PID: pid, Tree: name == "postgres"})
	}
	note := ""
	if len(missing) > 0 {
		note = "not measured (no pid file under $SECKILL_STACK_DIR/run, or not the process in use): " + strings.Join(missing, ", ")
		if slices.Contains(missing, "broker") && !slices.Contains(missing, "broker proxy") {
			note += "; the local stack's broker runs embedded in the proxy process, so the proxy's CPU includes it"
		}
	}
	return procs, note
}

// pairProcesses replaces the stack's PostgreSQL in procs by the pair's
// primary and adds its standby, each with its backends.
func pairProcesses(procs []*benchenv.SampledProcess, pair *pgpair.Pair) []*benchenv.SampledProcess {
	procs = slices.DeleteFunc(procs, func(p *benchenv.SampledProcess) bool { return p.Name == "postgres" })
	return append(procs, &benchenv.SampledProcess{Name: "postgres", PID: pair.Primary.PID(), Tree: true},
		&benchenv.SampledProcess{Name: "postgres standby", PID: pair.Standby.PID(), Tree: true})
}

// saleSampler records the time series of the sale.
type saleSampler struct {
	load       *saleload.Load
	pool       *pgxpool.Pool
	activityID int64
	// holdsDelayed: the broker cannot delay, so the relay holds the
	// payment-timeout rows in the outbox until they are due; those are
	// not owed before then (pgtest.OwedOutbox).
	holdsDelayed bool
	metricsURL   string
	procs        []*benchenv.SampledProcess
	http         *http.Client
	progress     io.Writer
	tty          bool

	t0       time.Time
	lastAt   time.Time
	lastCnt  saleload.Counts
	lastOrds int64
	// phase is "sale" while buyers run and "settle" afterwards.
	phase atomic.Value
	mu    sync.Mutex
	// series is written by the sampler goroutine and read after it ended.
	series []Sample
	// gauges is the latest scrape of the service's metrics.
	gauges map[string]float64
}

// Sample is one point of the time series; rates are over the
// interval that ends at T (seconds since the sale started).
type Sample struct {
	T                      float64 `json:"t"`
	Phase                  string  `json:"phase"`
	AcceptedPerSec         float64 `json:"accepted_per_sec"`
	SoldOutPerSec          float64 `json:"sold_out_per_sec"`
	AlreadyPurchasedPerSec float64 `json:"already_purchased_per_sec"`
	OtherPerSec            float64 `json:"other_per_sec"`
	Orders                 int64   `json:"orders"`
	OrdersPerSec           float64 `json:"orders_per_sec"`
	// OutboxUnpublished is the count of outbox rows the relay had not
	// published yet (-1: the count failed).
	OutboxUnpublished   int64              `json:"outbox_unpublished"`
	BacklogAgeSeconds   float64            `json:"backlog_age_seconds"`
	MQPendingAgeSeconds float64            `json:"mq_pending_age_seconds"`
	Unresolved          float64            `json:"unresolved"`
	P50Ms               float64            `json:"p50_ms"`
	P99Ms               float64            `json:"p99_ms"`
	Calls               int                `json:"calls"`
	CPUCores            map[string]float64 `json:"cpu_cores"`
}

// The service's metrics the sampler keeps (docs/operations.md).
const (
	metricUnresolvedAge = "reservation_unresolved_oldest_age_seconds"
	metricUnresolved    = "reservation_unresolved"
	metricPendingAge    = "reservation_mq_pending_oldest_age_seconds"
)

// begin takes the first CPU readings at t0.
func (s *saleSampler) begin(t0 time.Time) {
	s.t0, s.lastAt = t0, t0
	s.phase.Store("sale")
	for _, p := range s.procs {
		t, ok := p.Sample()
		if !ok {
			continue
		}
		p.First, p.Last = t, t
	}
}

// run samples every sampleEvery until ctx ends.
func (s *saleSampler) run(ctx context.Context) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.take(ctx)
		}
	}
}

// finish takes the last sample and ends the progress line.
func (s *saleSampler) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.take(ctx)
	if s.tty {
		fmt.Fprintln(s.progress)
	}
}

func (s *saleSampler) names() []string {
	out := make([]string, len(s.procs))
	for i, p := range s.procs {
		out[i] = p.Name
	}
	return out
}

// take records one sample.
func (s *saleSampler) take(ctx context.Context) {
	now := time.Now()
	dt := now.Sub(s.lastAt).Seconds()
	if dt <= 0 {
		return
	}
	cnt := s.load.Counts()
	lat := s.load.TakeInterval()
	smp := Sample{T: now.Sub(s.t0).Seconds(), Phase: s.phase.Load().(string), Calls: len(lat),
		AcceptedPerSec: float64(cnt.Accepted-s.lastCnt.Accepted) / dt, SoldOutPerSec: float64(cnt.SoldOut-s.lastCnt.SoldOut) / dt,
		AlreadyPurchasedPerSec: float64(cnt.AlreadyPurchased-s.lastCnt.AlreadyPurchased) / dt, OtherPerSec: float64(cnt.Other-s.lastCnt.Other) / dt,
		P50Ms: float64(lat.Percentile(0.50)) / 1e6, P99Ms: float64(lat.Percentile(0.99)) / 1e6,
		CPUCores: map[string]float64{}}
	qctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	err := s.pool.QueryRow(qctx, `SELECT count(*) FROM orders WHERE activity_id = $1`, s.activityID).Scan(&smp.Orders)
	cancel()
	if err != nil {
		smp.Orders = s.lastOrds // a slow count keeps the last one
	}
	smp.OrdersPerSec = float64(smp.Orders-s.lastOrds) / dt
	qctx, cancel = context.WithTimeout(ctx, 400*time.Millisecond)
	smp.OutboxUnpublished, err = pgtest.OwedOutbox(qctx, s.pool, s.holdsDelayed)
	cancel()
	if err != nil {
		smp.OutboxUnpublished = -1
	}
	if g, err := salekit.ScrapeGauges(ctx, s.http, s.metricsURL, metricUnresolvedAge, metricUnresolved, metricPendingAge); err == nil {
		s.mu.Lock()
		s.gauges = g
		s.mu.Unlock()
		smp.BacklogAgeSeconds, smp.Unresolved, smp.MQPendingAgeSeconds = g[metricUnresolvedAge], g[metricUnresolved], g[metricPendingAge]
	}
	for _, p := range s.procs {
		t, ok := p.Sample()
		if !ok {
			continue
		}
		smp.CPUCores[p.Name] = float64(t-p.Last) / procstat.ClockTicks / dt
		p.Last = t
	}
	s.series = append(s.series, smp)
	s.lastAt, s.lastCnt, s.lastOrds = now, cnt, smp.Orders
	s.printProgress(smp, cnt)
}

// printProgress writes the live progress line: rewritten in place on a
// terminal, one line per second otherwise.
func (s *saleSampler) printProgress(smp Sample, cnt saleload.Counts) {
	line := fmt.Sprintf("%6.1fs %-6s accepted %d  sold-out %d  already %d  other %d  orders %d  backlog %.1fs  outbox %d  p99 %.1fms",
		smp.T, smp.Phase, cnt.Accepted, cnt.SoldOut, cnt.AlreadyPurchased, cnt.Other, smp.Orders, smp.BacklogAgeSeconds, smp.OutboxUnpublished, smp.P99Ms)
	if s.tty {
		fmt.Fprintf(s.progress, "\r%-124s", line)
		return
	}
	if len(s.series)%2 == 0 {
		fmt.Fprintln(s.progress, line)
	}
}

// unresolved returns the latest scraped reservation_unresolved gauge and
// whether one was scraped.
func (s *saleSampler) unresolved() (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.gauges[metricUnresolved]
	return v, ok
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// saleSettle is what waitDrained saw of the backlog and of the outbox.
type saleSettle struct {
	// backlog: every accepted order id is an order or a rejection and
	// the service reports no unresolved reservation.
	backlog bool
	// outbox: the backlog drained and the relay published every outbox
	// row (the orders' events, FIFO state changes and payment-timeout
	// delay messages).
	outbox bool
	// outboxAt is when the wait saw the outbox empty (with outbox).
	outboxAt time.Time
	// unpublishedAtLoadEnd and unpublishedAtEnd are the outbox rows not
	// yet published when the load ended and when the wait ended.
	unpublishedAtLoadEnd, unpublishedAtEnd int64
}

// waitDrained waits until every accepted order id is an order or a
// rejection, the service reports no unresolved reservation and the
// outbox holds no unpublished row, or settle passed. The outbox is
// counted in the scratch database (benchenv.NewScratch's own, that no
// other service writes), and only once the backlog drained: until then
// orders still to be created add rows. It returns what it saw; the error
// is ctx's or a failed query's.
func waitDrained(ctx context.Context, pool *pgxpool.Pool, smp *saleSampler, load *saleload.Load, settle time.Duration) (saleSettle, error) {
	smp.phase.Store("settle")
	var st saleSettle
	n, err := pgtest.OwedOutbox(ctx, pool, smp.holdsDelayed)
	if err != nil {
		return st, fmt.Errorf("wait for the relay: %w", err)
	}
	st.unpublishedAtLoadEnd, st.unpublishedAtEnd = n, n
	ids, _ := load.AcceptedIDs()
	deadline := time.Now().Add(settle)
	for {
		if !st.backlog {
			_, _, open, err := benchenv.ResolveIDs(ctx, pool, ids)
			if err != nil {
				return st, fmt.Errorf("wait for the backlog: %w", err)
			}
			unresolved, scraped := smp.unresolved()
			st.backlog = open == 0 && (!scraped || unresolved == 0)
		}
		n, err := pgtest.OwedOutbox(ctx, pool, smp.holdsDelayed)
		if err != nil {
			return st, fmt.Errorf("wait for the relay: %w", err)
		}
		st.unpublishedAtEnd = n
		if st.backlog && n == 0 {
			st.outbox, st.outboxAt = true, time.Now()
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// holdsDelayed reports whether the relay holds delayed rows in the outbox
// on broker (its plug lacks delayed delivery).
func holdsDelayed(broker string) bool {
	plug, err := brokers.Lookup(broker)
	return err == nil && !plug.Features().DelayedDelivery
}
