package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/adapters/testkit/pgpair"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/chaos"
	"github.com/seckill-dev/seckill/tools/internal/procstat"
	"github.com/seckill-dev/seckill/tools/internal/reserveceiling"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// sampleEvery is the sampler's period.
const sampleEvery = 500 * time.Millisecond

// saleOptions are the flags of `seckill-bench sale`.
type saleOptions struct {
	Stock            int     `json:"stock"`
	Buyers           int     `json:"buyers"`
	Attempts         int     `json:"attempts"`
	SameRequestShare float64 `json:"same_request_share"`
	StopOnAnswer     bool    `json:"stop_on_answer"`
	Arrival          string  `json:"arrival"`
	RampSeconds      float64 `json:"ramp_seconds"`
	Clients          int     `json:"clients"`
	Protocol         string  `json:"protocol"`
	H2C              bool    `json:"h2c"`
	SettleSeconds    float64 `json:"settle_seconds"`
	CeilingClients   int     `json:"ceiling_clients"`
	CeilingCalls     int     `json:"ceiling_calls"`
	Seed             uint64  `json:"seed"`
	// PGStandby runs the sale on a private primary with a standby: sync or
	// async; empty: the stack's PostgreSQL.
	PGStandby string `json:"pg_standby,omitempty"`
	out       string
	// cpuProfile is the file of the CPU profile of this process (the load
	// generator and the sampler) from the first call until the sale
	// settled; empty: no profile.
	cpuProfile   string
	ramp, settle time.Duration
}

// load returns the settings of the sale's load generator.
func (o saleOptions) load() saleload.Options {
	return saleload.Options{Buyers: o.Buyers, Attempts: o.Attempts, SameRequestShare: o.SameRequestShare, StopOnAnswer: o.StopOnAnswer,
		Ramp: o.ramp, Clients: o.Clients, Protocol: o.Protocol, H2C: o.H2C, Seed: o.Seed, Stock: o.Stock}
}

// saleRun is what the phases of one `seckill-bench sale` run share: the
// options, the scratch stack and its logger, the service under load and
// how to reach it, the sale's activity, the scratch database, the load,
// the sampler and the note on the sampled processes.
type saleRun struct {
	o          saleOptions
	sc         *benchenv.Scratch
	log        *slog.Logger
	svc        *benchenv.Instance
	secret     []byte
	base       string
	activityID int64
	adminHTTP  *http.Client
	pool       *pgxpool.Pool
	load       *saleload.Load
	smp        *saleSampler
	procNote   string
	stdout     io.Writer
}

// benchSale runs a whole sale against one `seckill serve` subprocess on a
// scratch stack: buyers arrive (all at once or over a ramp) and each makes
// --attempts PlaceOrder calls through the public API while a sampler
// records answer rates, committed orders, the backlog age, the outbox
// rows not yet published, latency and the CPU of every process twice a
// second. It then waits for the backlog and the outbox to drain (every
// accepted order resolved and every outbox row published by the relay,
// so the CPU per order covers the relay's sends), checks the invariants,
// measures the reserve-script and bare-send ceilings, and writes
// result.json and a self-contained report.html. It fails when an
// invariant is violated (after writing both files).
func benchSale(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseSaleOptions(args)
	if err != nil {
		return err
	}
	var pair *pgpair.Pair
	pgDSN := ""
	if o.PGStandby != "" {
		if pair, err = pgpair.Start(ctx, pgpair.Options{Synchronous: o.PGStandby == "sync", Durable: true}); err != nil {
			return err
		}
		defer pair.Close()
		pgDSN = pair.Primary.URL("postgres") // the scratch database is made on the primary
	}
	sc, exe, log, err := saleload.ServiceScratch(ctx, o.out, 2*o.CeilingClients, pgDSN)
	if err != nil {
		return err
	}
	defer sc.Close()

	svc, err := saleload.StartService(ctx, sc, exe, o.out)
	if err != nil {
		return err
	}
	defer func() {
		svc.Stop()
		_ = svc.LogFile.Close()
	}()
	r := &saleRun{o: o, sc: sc, log: log, svc: svc, secret: []byte(sc.Config.AuthSecret), base: "http://" + svc.API,
		activityID: salekit.BenchActivityID(), adminHTTP: &http.Client{Timeout: 10 * time.Second}, stdout: stdout}
	if err := salekit.CreateSaleActivity(ctx, r.adminHTTP, r.base, r.secret, r.activityID, int64(o.Stock), time.Hour, 1); err != nil {
		return fmt.Errorf("create the sale's activity: %w", err)
	}
	if r.pool, err = pgxpool.New(ctx, sc.DSN); err != nil {
		return fmt.Errorf("connect to the scratch database: %w", err)
	}
	defer r.pool.Close()

	fmt.Fprintf(stdout, "seckill-bench sale: %s, %d cores, %d units, %d buyers x %d attempts (%.0f%% of later attempts reuse the first request_id), arrival %s, %d clients, protocol %s\n",
		benchenv.BrokerText(sc.Config), runtime.NumCPU(), o.Stock, o.Buyers, o.Attempts, 100*o.SameRequestShare, arrivalText(o), o.Clients, o.load().ProtocolText())
	fmt.Fprintf(stdout, "service log: %s\n", svc.LogFile.Name())

	if r.load, err = saleload.New(o.load(), r.base, r.secret, r.activityID); err != nil {
		return err
	}
	// The load generator's heap is small and its garbage is per call: at
	// the default GOGC the collector ran a few times a second, about 5 %
	// of this process's CPU. Memory is not what this process is short of.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	r.setSampler(pair)
	loadEnd, settled, err := r.sell(ctx)
	if err != nil {
		return err
	}
	res, err := r.result(ctx, loadEnd, settled)
	if err != nil {
		return err
	}
	return r.writeResult(res)
}

// setSampler sets the run's sampler over the service's, the stack's and
// (with pair) the private PostgreSQL pair's processes, and the note on
// them.
func (r *saleRun) setSampler(pair *pgpair.Pair) {
	servicePID := r.svc.PID()
	procs, procNote := saleProcesses(servicePID, r.sc.Env.StackProcesses())
	if pair != nil {
		procs = pairProcesses(procs, pair)
		procNote += fmt.Sprintf("; PostgreSQL is a private primary with a %s standby (postgres and postgres standby)", r.o.PGStandby)
	}
	r.procNote = procNote
	r.smp = &saleSampler{load: r.load, pool: r.pool, activityID: r.activityID, metricsURL: "http://" + r.svc.Ops + "/metrics",
		procs: procs, http: &http.Client{Timeout: 400 * time.Millisecond}, progress: os.Stderr,
		tty: isTerminal(os.Stderr), holdsDelayed: holdsDelayed(r.sc.Config.Broker.Name)}
}

// sell runs the sale: the sampler (in a goroutine it owns) and the CPU
// profile of --cpuprofile run from the first call until the backlog and
// the outbox are drained (or --settle ran out). It returns the end of the
// load (its last answer, or its start when there was none) and what the
// wait for the drain saw.
func (r *saleRun) sell(ctx context.Context) (time.Time, saleSettle, error) {
	stopProfile, err := startCPUProfile(r.o.cpuProfile)
	if err != nil {
		return time.Time{}, saleSettle{}, err
	}
	load, smp := r.load, r.smp
	smp.begin(time.Now())
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); smp.run(sampleCtx) }()
	load.Run(ctx, smp.t0)
	loadEnd := load.LastAnswerAt()
	if loadEnd.IsZero() {
		loadEnd = smp.t0 // no answer at all (ctx ended)
	}
	settled, settleErr := waitDrained(ctx, r.pool, smp, load, r.o.settle)
	stopSampling()
	<-sampled
	smp.finish()
	if err := stopProfile(); err != nil {
		return time.Time{}, saleSettle{}, err
	}
	if settleErr != nil {
		return time.Time{}, saleSettle{}, settleErr
	}
	return loadEnd, settled, nil
}

// result gathers the sale's result: the summary, the invariants' verdicts
// and, once the service is stopped (they then have the machine to
// themselves, as in `seckill-bench place`), the ceilings.
func (r *saleRun) result(ctx context.Context, loadEnd time.Time, settled saleSettle) (saleResult, error) {
	o, smp := r.o, r.smp
	res := saleResult{Settings: o, Command: strings.Join(os.Args, " "), Broker: r.sc.Env.Broker(), Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), StartedAt: smp.t0, ActivityID: r.activityID, Processes: smp.names(),
		ProcessNote: r.procNote, Series: smp.series}
	sum, err := summarizeSale(ctx, r.pool, r.load, smp, r.activityID, loadEnd, settled)
	if err != nil {
		return res, err
	}
	res.Invariants, err = checkSaleInvariants(ctx, r.pool, r.adminHTTP, r.base, r.secret, r.load, r.activityID, o.Stock)
	if err != nil {
		return res, err
	}
	res.Violations = chaos.ViolationCount(res.Invariants)

	// The ceilings, once the service is gone: they have the machine to
	// themselves, as in `seckill-bench place`.
	r.svc.Stop()
	sum.Ceilings, err = measureSaleCeilings(ctx, r.sc, r.log, o)
	if err != nil {
		return res, err
	}
	sum.Ceilings.rate(sum)
	res.Summary = sum
	return res, nil
}

// writeResult writes result.json and report.html, prints the summary and
// where both files are, and fails when an invariant was violated.
func (r *saleRun) writeResult(res saleResult) error {
	jsonPath, htmlPath, err := writeSaleReport(r.o.out, res)
	if err != nil {
		return err
	}
	fmt.Fprintln(r.stdout)
	writeSaleSummary(r.stdout, res)
	fmt.Fprintf(r.stdout, "\nresult: %s\nreport: %s\n", jsonPath, htmlPath)
	if res.Violations > 0 {
		return fmt.Errorf("bench sale: %d invariant violations (see %s)", res.Violations, jsonPath)
	}
	return nil
}

// parseSaleOptions reads and validates the flags.
func parseSaleOptions(args []string) (saleOptions, error) {
	fs := flag.NewFlagSet("sale", flag.ContinueOnError)
	var o saleOptions
	fs.IntVar(&o.Stock, "stock", 10000, "units on sale")
	fs.IntVar(&o.Buyers, "buyers", 50000, "buyers, each with a user id (and token) of their own")
	fs.IntVar(&o.Attempts, "attempts", 2, "PlaceOrder calls per buyer (a buyer's attempts follow one another)")
	fs.Float64Var(&o.SameRequestShare, "same-request-share", 0.5, "share of a buyer's later attempts that reuse the first request_id (a retried click); the others use a new request_id (a new click)")
	fs.BoolVar(&o.StopOnAnswer, "stop-on-answer", false, "a buyer stops after a definite answer (accepted, sold out, already purchased) instead of making every attempt")
	fs.StringVar(&o.Arrival, "arrival", "burst", "burst (every buyer at the start) or ramp (buyers start evenly spread over --ramp)")
	fs.DurationVar(&o.ramp, "ramp", 10*time.Second, "with --arrival ramp: the time over which buyers start")
	fs.IntVar(&o.Clients, "clients", 256, "concurrent clients (a client serves one buyer at a time)")
	fs.StringVar(&o.Protocol, "protocol", "connect", "connect (Connect JSON over HTTP/1.1, one connection per client; --h2c for HTTP/2) or grpc (gRPC over h2c)")
	fs.BoolVar(&o.H2C, "h2c", false, "with --protocol connect: HTTP/2 without TLS instead of HTTP/1.1")
	fs.StringVar(&o.out, "out", filepath.Join(os.TempDir(), "seckill-bench-sale"), "directory for result.json, report.html and the service's log")
	fs.DurationVar(&o.settle, "settle", 120*time.Second, "how long to wait after the load for every accepted reservation to be resolved")
	fs.IntVar(&o.CeilingClients, "ceiling-clients", 64, "clients of the reserve-script and bare-send ceilings")
	fs.IntVar(&o.CeilingCalls, "ceiling-calls", 60000, "reserve-script calls of the ceiling (the send ceiling makes a third as many sends)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the buyers' choices (which later attempts reuse the request_id)")
	fs.StringVar(&o.PGStandby, "pg-standby", "", "run the sale on a private PostgreSQL primary with a streaming standby (the local stack's settings) instead "+
		"of the stack's PostgreSQL: sync (synchronous commits, the durability docs/operations.md chooses) or async")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (load generator and sampler) from the first call until the sale settled to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.Stock <= 0 || o.Buyers <= 0 || o.Attempts <= 0 || o.Clients <= 0:
		return o, fmt.Errorf("--stock, --buyers, --attempts and --clients must be > 0: %w", flag.ErrHelp)
	case o.SameRequestShare < 0 || o.SameRequestShare > 1:
		return o, fmt.Errorf("--same-request-share must be in [0, 1]: %w", flag.ErrHelp)
	case o.Arrival != "burst" && o.Arrival != "ramp":
		return o, fmt.Errorf("--arrival must be burst or ramp, not %q: %w", o.Arrival, flag.ErrHelp)
	case o.Arrival == "ramp" && o.ramp <= 0:
		return o, fmt.Errorf("--ramp must be > 0: %w", flag.ErrHelp)
	case o.Protocol != "connect" && o.Protocol != "grpc":
		return o, fmt.Errorf("--protocol must be connect or grpc, not %q: %w", o.Protocol, flag.ErrHelp)
	case o.PGStandby != "" && o.PGStandby != "sync" && o.PGStandby != "async":
		return o, fmt.Errorf("--pg-standby must be sync or async, not %q: %w", o.PGStandby, flag.ErrHelp)
	case o.settle <= 0 || o.CeilingClients <= 0 || o.CeilingCalls <= 0:
		return o, fmt.Errorf("--settle, --ceiling-clients and --ceiling-calls must be > 0: %w", flag.ErrHelp)
	}
	if o.Arrival == "burst" {
		o.ramp = 0
	}
	o.RampSeconds, o.SettleSeconds = o.ramp.Seconds(), o.settle.Seconds()
	return o, nil
}

func arrivalText(o saleOptions) string {
	if o.Arrival == "ramp" {
		return "ramp over " + o.ramp.String()
	}
	return "burst"
}

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
	series []saleSample
	// gauges is the latest scrape of the service's metrics.
	gauges map[string]float64
}

// saleSample is one point of the time series; rates are over the
// interval that ends at T (seconds since the sale started).
type saleSample struct {
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
	smp := saleSample{T: now.Sub(s.t0).Seconds(), Phase: s.phase.Load().(string), Calls: len(lat),
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
func (s *saleSampler) printProgress(smp saleSample, cnt saleload.Counts) {
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
// rejection, the service reports no unresolved reservation and the outbox
// holds no unpublished row, or settle passed. The outbox is counted in
// the scratch database (newScratch's own, that no other service writes),
// and only once the backlog drained: until then orders still to be
// created add rows. It returns what it saw; the error is ctx's or a
// failed query's.
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

// startCPUProfile starts a CPU profile of this process into path and
// returns the function that stops it and closes the file; with an empty
// path both do nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start the CPU profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("write the CPU profile: %w", err)
		}
		return nil
	}, nil
}

// saleResult is everything result.json holds.
type saleResult struct {
	Settings    saleOptions              `json:"settings"`
	Command     string                   `json:"command"`
	Broker      string                   `json:"broker"`
	Cores       int                      `json:"cores"`
	GoVersion   string                   `json:"go_version"`
	StartedAt   time.Time                `json:"started_at"`
	ActivityID  int64                    `json:"activity_id"`
	Processes   []string                 `json:"processes"`
	ProcessNote string                   `json:"process_note,omitempty"`
	Series      []saleSample             `json:"series"`
	Summary     saleSummary              `json:"summary"`
	Invariants  []salekit.InvariantCheck `json:"invariants"`
	Violations  int64                    `json:"violations"`
}

// saleSummary holds the figures of the whole sale. Times are seconds;
// P3 is the time of the last committed order (max orders.created_at, the
// database's now() at the start of its order-create transaction) minus
// the client's receive time of the last accepted reservation (the first
// answer carrying the last new order id), both on this host's clock.
// Drain is the same order time minus the end of the load (the last
// answer of any kind), 0 when the orders kept pace with the load.
// RelayDrain is the time the bench saw the outbox empty (it counts the
// unpublished rows every 250 ms once the backlog drained) minus the end of
// the load; it is set only when the outbox drained. LastPublishedAt is
// max(event_outbox.published_at): the start of the relay transaction that
// published the last row, up to one send earlier than the row's commit. The CPU figures cover the sale from
// the first call until the backlog and the outbox drained (or --settle
// ran out), the relay's sends included.
type saleSummary struct {
	LoadSeconds       float64            `json:"load_seconds"`
	SellingSeconds    float64            `json:"selling_seconds"`
	Answers           map[string]int64   `json:"answers"`
	AnswersPerSec     map[string]float64 `json:"answers_per_sec"`
	OtherByCode       map[string]int     `json:"other_by_code"`
	CallsPerSec       float64            `json:"calls_per_sec"`
	SellingRatePerSec float64            `json:"selling_rate_per_sec"`
	AcceptedOrders    int                `json:"accepted_orders"`
	OrdersCommitted   int64              `json:"orders_committed"`
	Rejected          int                `json:"rejected"`
	Drained           bool               `json:"drained"`
	P3Seconds         float64            `json:"p3_seconds"`
	DrainSeconds      float64            `json:"drain_seconds"`
	// OutboxUnpublishedAtLoadEnd and OutboxUnpublishedAtEnd are the
	// outbox rows not yet published when the load ended and when the
	// bench stopped waiting.
	OutboxUnpublishedAtLoadEnd int64              `json:"outbox_unpublished_at_load_end"`
	OutboxUnpublishedAtEnd     int64              `json:"outbox_unpublished_at_end"`
	OutboxDrained              bool               `json:"outbox_drained"`
	RelayDrainSeconds          float64            `json:"relay_drain_seconds"`
	LastPublishedAt            time.Time          `json:"last_published_at"`
	LastAcceptedAt             time.Time          `json:"last_accepted_at"`
	LoadEndAt                  time.Time          `json:"load_end_at"`
	LastOrderAt                time.Time          `json:"last_order_at"`
	PlaceP50Ms                 float64            `json:"place_p50_ms"`
	PlaceP99Ms                 float64            `json:"place_p99_ms"`
	MeasuredSeconds            float64            `json:"measured_seconds"`
	CPUSeconds                 map[string]float64 `json:"cpu_seconds"`
	CPUMicrosPerOrder          map[string]float64 `json:"cpu_us_per_order"`
	CPUMicrosPerOrderAll       float64            `json:"cpu_us_per_order_all"`
	// SoldOutPhasePerSec is the answers per second from the last
	// accepted answer to the end of the load (every buyer then hears
	// sold out or already purchased).
	SoldOutPhasePerSec float64 `json:"sold_out_phase_per_sec"`
	// SellingCPUMicrosPerOrder is the CPU per accepted order of the
	// sampling intervals up to the one holding the last accepted answer:
	// the selling phase alone, without the sold-out answers after it.
	SellingCPUMicrosPerOrder    map[string]float64 `json:"selling_cpu_us_per_order"`
	SellingCPUMicrosPerOrderAll float64            `json:"selling_cpu_us_per_order_all"`
	Ceilings                    saleCeilings       `json:"ceilings"`
}

// summarizeSale computes the summary from the load, the sampler and the
// scratch database.
func summarizeSale(ctx context.Context, pool *pgxpool.Pool, load *saleload.Load, smp *saleSampler, activityID int64, loadEnd time.Time, st saleSettle) (saleSummary, error) {
	ids, lastAccepted := load.AcceptedIDs()
	s := saleSummary{Drained: st.backlog, OutboxDrained: st.outbox, OutboxUnpublishedAtLoadEnd: st.unpublishedAtLoadEnd,
		OutboxUnpublishedAtEnd: st.unpublishedAtEnd, LoadEndAt: loadEnd, LastAcceptedAt: lastAccepted, AcceptedOrders: len(ids),
		Answers: map[string]int64{}, AnswersPerSec: map[string]float64{}, OtherByCode: map[string]int{},
		CPUSeconds: map[string]float64{}, CPUMicrosPerOrder: map[string]float64{}, SellingCPUMicrosPerOrder: map[string]float64{}}
	s.LoadSeconds = loadEnd.Sub(smp.t0).Seconds()
	s.countAnswers(load, smp.t0, len(ids), lastAccepted)
	if err := s.readBooks(ctx, pool, ids, activityID, loadEnd, lastAccepted, st); err != nil {
		return s, err
	}
	s.addCPU(smp, len(ids))
	// The sold-out phase: from the last accepted answer to the end of
	// the load.
	if d := loadEnd.Sub(lastAccepted).Seconds(); d > 0 && !lastAccepted.IsZero() {
		s.SoldOutPhasePerSec = float64(load.AnsweredAfter(lastAccepted)) / d
	}
	s.addSellingCPU(smp, len(ids))
	return s, nil
}

// countAnswers fills in the answers of the load by outcome and their
// rates, the selling phase's length from start and rate (accepted orders
// up to lastAccepted), the other answers by code and PlaceOrder's
// latency.
func (s *saleSummary) countAnswers(load *saleload.Load, start time.Time, accepted int, lastAccepted time.Time) {
	cnt := load.Counts()
	for name, n := range map[string]int64{saleload.Accepted: cnt.Accepted, saleload.SoldOut: cnt.SoldOut,
		saleload.AlreadyPurchased: cnt.AlreadyPurchased, saleload.Other: cnt.Other} {
		s.Answers[name] = n
		if s.LoadSeconds > 0 {
			s.AnswersPerSec[name] = float64(n) / s.LoadSeconds
		}
	}
	if s.LoadSeconds > 0 {
		s.CallsPerSec = float64(cnt.Total()) / s.LoadSeconds
	}
	if !lastAccepted.IsZero() {
		s.SellingSeconds = lastAccepted.Sub(start).Seconds()
		if s.SellingSeconds > 0 {
			s.SellingRatePerSec = float64(accepted) / s.SellingSeconds
		}
	}
	for k, v := range load.OtherByCode() {
		s.OtherByCode[k] = v
	}
	all := load.Latencies()
	s.PlaceP50Ms, s.PlaceP99Ms = float64(all.Percentile(0.50))/1e6, float64(all.Percentile(0.99))/1e6
}

// readBooks reads from the scratch database the sale's committed orders
// (how many, the last one's time, P3 and the drain after loadEnd), how
// many of the accepted ids were rejected, and, when the outbox drained,
// the relay's drain time and last publication.
func (s *saleSummary) readBooks(ctx context.Context, pool *pgxpool.Pool, ids []string, activityID int64, loadEnd, lastAccepted time.Time, st saleSettle) error {
	var last *time.Time
	if err := pool.QueryRow(ctx, `SELECT count(*), max(created_at) FROM orders WHERE activity_id = $1`, activityID).
		Scan(&s.OrdersCommitted, &last); err != nil {
		return fmt.Errorf("count the sale's orders: %w", err)
	}
	if last != nil {
		s.LastOrderAt = *last
		if !lastAccepted.IsZero() {
			s.P3Seconds = last.Sub(lastAccepted).Seconds()
		}
		s.DrainSeconds = max(0, last.Sub(loadEnd).Seconds())
	}
	_, rejected, _, err := benchenv.ResolveIDs(ctx, pool, ids)
	if err != nil {
		return fmt.Errorf("count rejections: %w", err)
	}
	s.Rejected = rejected
	if st.outbox {
		s.RelayDrainSeconds = max(0, st.outboxAt.Sub(loadEnd).Seconds())
		var published *time.Time
		if err := pool.QueryRow(ctx, `SELECT max(published_at) FROM event_outbox`).Scan(&published); err != nil {
			return fmt.Errorf("read the last outbox publication: %w", err)
		}
		if published != nil {
			s.LastPublishedAt = *published
		}
	}
	return nil
}

// addCPU fills in the measured time and every sampled process's CPU
// seconds over it, and, with accepted orders, the CPU per order.
func (s *saleSummary) addCPU(smp *saleSampler, accepted int) {
	s.MeasuredSeconds = smp.lastAt.Sub(smp.t0).Seconds()
	var total float64
	for _, p := range smp.procs {
		sec := float64(p.Last-p.First) / procstat.ClockTicks
		s.CPUSeconds[p.Name] = sec
		total += sec
		if accepted > 0 {
			s.CPUMicrosPerOrder[p.Name] = sec * 1e6 / float64(accepted)
		}
	}
	if accepted > 0 {
		s.CPUMicrosPerOrderAll = total * 1e6 / float64(accepted)
	}
}

// addSellingCPU fills in, with accepted orders, the CPU per accepted
// order of the sampling intervals up to the one holding the last accepted
// answer (SellingSeconds): the selling phase alone.
func (s *saleSummary) addSellingCPU(smp *saleSampler, accepted int) {
	if accepted == 0 {
		return
	}
	prev := 0.0
	for _, smp := range smp.series {
		dt := smp.T - prev
		prev = smp.T
		if smp.T-dt >= s.SellingSeconds {
			break
		}
		for name, cores := range smp.CPUCores {
			us := cores * dt * 1e6 / float64(accepted)
			s.SellingCPUMicrosPerOrder[name] += us
			s.SellingCPUMicrosPerOrderAll += us
		}
	}
}

// checkSaleInvariants checks docs/invariants.md on the settled sale:
// I1-I3, I6 and I7 from the scratch database, the client's answers and
// the service's stock report (AdminService.GetStockReport, a read); I4
// and I5 are named as not checked on their own.
func checkSaleInvariants(ctx context.Context, pool *pgxpool.Pool, httpc *http.Client, base string, secret []byte, load *saleload.Load, activityID int64, stock int) ([]salekit.InvariantCheck, error) {
	ids, _ := load.AcceptedIDs()
	books, err := benchenv.ReadSaleBooks(ctx, pool, activityID, ids)
	if err != nil {
		return nil, fmt.Errorf("check the invariants: %w", err)
	}
	live, noStock, dupUsers, dupEffects := books.Live, books.NoStock, books.DupUsers, books.DupEffects
	orders, rejected, open, err := benchenv.ResolveIDs(ctx, pool, ids)
	if err != nil {
		return nil, fmt.Errorf("check the invariants: %w", err)
	}
	twoOrders, changedRetry := load.IdempotencyBreaks()

	rep, repErr := salekit.StockReport(ctx, httpc, base, secret, activityID)
	i6 := salekit.StockCheck(rep, repErr)
	return []salekit.InvariantCheck{
		{ID: "I1", Name: "no oversell", Checked: true, Violations: max(0, live-int64(stock)) + noStock,
			Detail: fmt.Sprintf("%d live orders for %d units; %d accepted reservations found no final stock", live, stock, noStock)},
		{ID: "I2", Name: "one live order per buyer", Checked: true, Violations: dupUsers + int64(twoOrders),
			Detail: fmt.Sprintf("%d users with more than one live order; %d buyers told two different order ids", dupUsers, twoOrders)},
		{ID: "I3", Name: "one effect per message", Checked: true, Violations: dupEffects,
			Detail: fmt.Sprintf("%d message ids with more than one ORDER_CREATED ledger entry", dupEffects)},
		{ID: "I4", Name: "one compensation per reservation",
			Detail: "not checked on its own: a sale that settles releases nothing unless a reservation is rejected; a second release would show in I6 as Redis stock above the books"},
		{ID: "I5", Name: "a paid order is never canceled", Detail: "not exercised: nobody pays in this benchmark"},
		i6,
		{ID: "I7", Name: "nothing acknowledged is lost", Checked: true, Violations: int64(open),
			Detail: fmt.Sprintf("%d accepted order ids: %d orders, %d rejections, %d neither", len(ids), orders, rejected, open)},
		{ID: "API", Name: "a retried request_id keeps its answer", Checked: true, Violations: int64(changedRetry),
			Detail: fmt.Sprintf("%d retries of an accepted request_id refused", changedRetry)},
	}, nil
}

// saleCeilings are the ceilings measured after the sale.
type saleCeilings struct {
	Clients       int     `json:"clients"`
	ReservePerSec float64 `json:"reserve_per_sec"`
	ReserveP50Ms  float64 `json:"reserve_p50_ms"`
	ReserveP99Ms  float64 `json:"reserve_p99_ms"`
	SendPerSec    float64 `json:"send_per_sec"`
	SendP50Ms     float64 `json:"send_p50_ms"`
	SendP99Ms     float64 `json:"send_p99_ms"`
	SendUnknown   int     `json:"send_unknown"`
	SendRejected  int     `json:"send_rejected"`
	MinPerSec     float64 `json:"min_per_sec"`
	// SellingRatio is the sale's selling rate (accepted reservations per
	// second until the last one) over MinPerSec; CallsRatio is every
	// PlaceOrder answer per second over MinPerSec.
	SellingRatio float64 `json:"selling_ratio"`
	CallsRatio   float64 `json:"calls_ratio"`
}

// rate fills the ratios from the summary.
func (c *saleCeilings) rate(s saleSummary) {
	c.MinPerSec = min(c.ReservePerSec, c.SendPerSec)
	if c.MinPerSec > 0 {
		c.SellingRatio = s.SellingRatePerSec / c.MinPerSec
		c.CallsRatio = s.CallsPerSec / c.MinPerSec
	}
}

// measureSaleCeilings measures the reserve script alone (EVALSHA on the
// scratch Redis database) and a bare synchronous send loop to the scratch
// order-create topic, as `seckill-bench place` does.
func measureSaleCeilings(ctx context.Context, sc *benchenv.Scratch, log *slog.Logger, o saleOptions) (saleCeilings, error) {
	c := saleCeilings{Clients: o.CeilingClients}
	store, err := redis.New(sc.Redis, redis.Config{Namespace: sc.Config.Redis.Namespace}, nil, log)
	if err != nil {
		return c, fmt.Errorf("reserve ceiling: %w", err)
	}
	rr, err := reserveceiling.Measure(ctx, store, reserveceiling.Options{ActivityID: salekit.BenchActivityID(), SKUID: 1, Reservations: o.CeilingCalls, Clients: o.CeilingClients})
	if err != nil {
		return c, fmt.Errorf("reserve ceiling: %w", err)
	}
	c.ReservePerSec, c.ReserveP50Ms, c.ReserveP99Ms = rr.PerSecond, float64(rr.P50)/1e6, float64(rr.P99)/1e6

	pub, closePub, err := sc.Env.Publisher(ctx, sc.Config.Broker.Neutral.SendTimeout, log)
	if err != nil {
		return c, fmt.Errorf("send ceiling: %w", err)
	}
	defer closePub()
	sl, err := benchkit.SendLoop(ctx, pub, max(1, o.CeilingCalls/3), o.CeilingClients, func(i int) ports.OutboundMessage {
		id := fmt.Sprintf("evt_sale_ceiling_%d_%d", time.Now().UnixNano(), i)
		return ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: message.TagCreateOrder,
			Keys: []string{id}, Body: []byte(`{"bench":true}`)}
	})
	if err != nil {
		return c, fmt.Errorf("send ceiling: %w", err)
	}
	c.SendPerSec, c.SendP50Ms, c.SendP99Ms = sl.Rate(), float64(sl.Percentile(0.50))/1e6, float64(sl.Percentile(0.99))/1e6
	c.SendUnknown, c.SendRejected = sl.Unknown, sl.Rejected
	return c, nil
}

// writeSaleSummary prints the summary table and the invariants.
func writeSaleSummary(w io.Writer, r saleResult) {
	for _, row := range summaryRows(r) {
		fmt.Fprintf(w, "%-46s %s\n", row[0], row[1])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-4s %-36s %10s  %s\n", "", "invariant", "violations", "detail")
	for _, c := range r.Invariants {
		v := strconv.FormatInt(c.Violations, 10)
		if !c.Checked {
			v = "-"
		}
		fmt.Fprintf(w, "%-4s %-36s %10s  %s\n", c.ID, c.Name, v, c.Detail)
	}
}
