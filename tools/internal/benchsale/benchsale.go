package benchsale

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
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/testkit/pgpair"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// sampleEvery is the sampler's period.
const sampleEvery = 500 * time.Millisecond

// Options are the flags of `seckill-bench sale`, as result.json records
// them: each field is its flag's value, RampSeconds and SettleSeconds in
// seconds (the ramp 0 for a burst).
type Options struct {
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
func (o Options) load() saleload.Options {
	return saleload.Options{Buyers: o.Buyers, Attempts: o.Attempts, SameRequestShare: o.SameRequestShare, StopOnAnswer: o.StopOnAnswer,
		Ramp: o.ramp, Clients: o.Clients, Protocol: o.Protocol, H2C: o.H2C, Seed: o.Seed, Stock: o.Stock}
}

// saleRun is what the phases of one `seckill-bench sale` run share: the
// options, the scratch stack and its logger, the service under load and
// how to reach it, the sale's activity, the scratch database, the load,
// the sampler and the note on the sampled processes.
type saleRun struct {
	o          Options
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

// Run is `seckill-bench sale` with the command-line flags args, its
// summary going to stdout and its progress to stderr. It runs a whole
// sale against one `seckill serve` subprocess on a scratch stack: buyers
// arrive (all at once or over a ramp) and each makes --attempts
// PlaceOrder calls through the public API while a sampler records answer
// rates, committed orders, the backlog age, the outbox rows not yet
// published, latency and the CPU of every process twice a second. It
// then waits for the backlog and the outbox to drain (every accepted
// order resolved and every outbox row published by the relay, so the CPU
// per order covers the relay's sends), checks the invariants, measures
// the reserve-script and bare-send ceilings, and writes result.json and
// a self-contained report.html. It fails when an invariant is violated
// (after writing both files); a bad flag is an error wrapping
// flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
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
func (r *saleRun) result(ctx context.Context, loadEnd time.Time, settled saleSettle) (Result, error) {
	o, smp := r.o, r.smp
	res := Result{Settings: o, Command: strings.Join(os.Args, " "), Broker: r.sc.Env.Broker(), Cores: runtime.NumCPU(),
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
	res.Violations = salekit.ViolationCount(res.Invariants)

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
func (r *saleRun) writeResult(res Result) error {
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
func parseSaleOptions(args []string) (Options, error) {
	fs := flag.NewFlagSet("sale", flag.ContinueOnError)
	var o Options
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

func arrivalText(o Options) string {
	if o.Arrival == "ramp" {
		return "ramp over " + o.ramp.String()
	}
	return "burst"
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
