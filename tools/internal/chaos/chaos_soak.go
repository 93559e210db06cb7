package chaos

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/runreport"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// soakFaults are the faults `chaos soak` may rotate through: the chaos
// scenarios whose component heals in place, so the same two service
// instances, PostgreSQL and Redis serve the whole hour. The failovers
// (the old primary never comes back), restore-redis (a Redis that
// returns older takes acknowledged reservations of the sale in flight
// with it, docs/operations.md) and crash-consumers (a phase of its own)
// stay single scenarios of `chaos`.
var soakFaults = []string{
	"kill-service", "kill-redis", "kill-postgres", "kill-proxy", "pause-service", "pause-redis", "pause-postgres",
	"pause-proxy", "delay-postgres", "reset-redis", "blackhole-postgres", "delay-redis", "reset-postgres",
	"blackhole-redis", "kill-namesrv",
}

// soakOptions are the flags of `seckill-bench chaos soak`.
type soakOptions struct {
	duration, saleEvery, faultEvery, down time.Duration
	spread, paymentTimeout, settle        time.Duration
	maxRecovery, sampleEvery, warmup      time.Duration
	retention                             time.Duration
	stock, buyers, clients                int
	payShare, cancelShare                 float64
	faults                                []string
	out, stackScript, command             string
}

func parseSoakOptions(args []string) (soakOptions, error) {
	o := soakOptions{command: "seckill-bench chaos soak " + strings.Join(args, " ")}
	fs := flag.NewFlagSet("chaos soak", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 60*time.Minute, "how long new sales start and faults are injected")
	fs.DurationVar(&o.saleEvery, "sale-every", 2*time.Minute, "a new activity goes on sale this often")
	fs.DurationVar(&o.faultEvery, "fault-every", 5*time.Minute, "one fault of the list is injected this often")
	fs.DurationVar(&o.down, "down", 5*time.Second, "how long a faulted component stays down, paused or faulty")
	fs.DurationVar(&o.spread, "spread", time.Minute, "each sale's buyers arrive evenly over this time")
	fs.DurationVar(&o.paymentTimeout, "payment-timeout", time.Minute, "each activity's payment timeout")
	fs.DurationVar(&o.settle, "settle", 3*time.Minute, "how long a sale may take to come to rest after its payment timeout")
	fs.IntVar(&o.stock, "stock", 300, "units per activity")
	fs.IntVar(&o.buyers, "buyers", 900, "buyers per activity (each retries its one request_id until a definite answer)")
	fs.IntVar(&o.clients, "clients", 16, "concurrent buyers per activity")
	fs.Float64Var(&o.payShare, "pay", 1.0/3, "share of the orders their buyer pays")
	fs.Float64Var(&o.cancelShare, "cancel", 1.0/3, "share of the orders their buyer cancels (the rest time out)")
	faults := fs.String("faults", strings.Join(soakFaults[:11], ","), "comma-separated faults, injected in turn: "+strings.Join(soakFaults, ", "))
	fs.DurationVar(&o.retention, "retention", 5*time.Minute, "the services' Redis retentions (request claim, resolved reservation, order view; "+
		"24h each by default): short, so their bound shows within the soak")
	fs.DurationVar(&o.maxRecovery, "max-recovery", 10*time.Second, "fail when a fault's recovery takes longer (0: report only)")
	fs.DurationVar(&o.sampleEvery, "sample-every", 15*time.Second, "how often the resources are sampled")
	fs.DurationVar(&o.warmup, "warmup", 10*time.Minute, "samples before this are left out of the trends (at most a sixth of the duration)")
	fs.StringVar(&o.out, "out", "bench-results/soak-"+time.Now().UTC().Format("20060102T150405Z"), "directory for result.json and report.html")
	fs.StringVar(&o.stackScript, "stack", "deploy/local/stack.sh", "the local stack script (restarts a killed stack process)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.faults = strings.Split(*faults, ",")
	for _, f := range o.faults {
		if !slices.Contains(soakFaults, f) {
			return o, fmt.Errorf("unknown soak fault %q: %w", f, flag.ErrHelp)
		}
	}
	if o.duration <= 0 || o.saleEvery <= 0 || o.faultEvery <= 0 || o.stock <= 0 || o.buyers <= 0 || o.clients <= 0 || o.retention <= 0 ||
		o.payShare < 0 || o.cancelShare < 0 || o.payShare+o.cancelShare > 1 {
		return o, fmt.Errorf("durations, stock, buyers and clients must be > 0 and pay + cancel <= 1: %w", flag.ErrHelp)
	}
	o.warmup = min(o.warmup, o.duration/6)
	return o, nil
}

// soakRig is what the whole soak runs on: a scratch namespace of the local
// stack (its own database and topics), a redis-server of its own, fault
// proxies in front of both for the connection faults, and two service
// instances.
type soakRig struct {
	cfg       config.Config
	sc        *benchenv.Scratch
	redis     *benchenv.PrivateRedis
	redisDB   *goredis.Client
	pgProxy   *faultproxy.Proxy
	redisProx *faultproxy.Proxy
	instances []*benchenv.Instance
	bases     []string
	pool      *pgxpool.Pool
	httpc     *http.Client
	secret    []byte
	closers   []func()
	// logDir holds the instances' logs; it is kept after the soak.
	logDir string
}

func (r *soakRig) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// startSoakRig builds the rig and waits until both instances are live;
// their Redis retentions are retention.
func startSoakRig(ctx context.Context, retention time.Duration) (rig *soakRig, err error) {
	rig = &soakRig{httpc: &http.Client{Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			rig.close()
		}
	}()
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return rig, err
	}
	rig.cfg, rig.secret = cfg, []byte(cfg.AuthSecret)
	if rig.redis, err = benchenv.StartPrivateRedis(ctx); err != nil {
		return rig, err
	}
	rig.closers = append(rig.closers, rig.redis.Stop)
	rig.redisDB = goredis.NewClient(&goredis.Options{Addr: rig.redis.Addr()})
	rig.closers = append(rig.closers, func() { _ = rig.redisDB.Close() })
	if rig.sc, err = benchenv.NewScratch(ctx, cfg, log, 8); err != nil {
		return rig, err
	}
	rig.closers = append(rig.closers, rig.sc.Close)
	if rig.pool, err = pgxpool.New(ctx, rig.sc.DSN+"&pool_max_conns=4"); err != nil {
		return rig, err
	}
	rig.closers = append(rig.closers, rig.pool.Close)
	pgDSN, err := rig.proxies()
	if err != nil {
		return rig, err
	}
	return rig, rig.startInstances(ctx, pgDSN, retention)
}

// proxies puts a fault proxy in front of PostgreSQL and of Redis and
// returns the DSN through the PostgreSQL one.
func (r *soakRig) proxies() (string, error) {
	u, err := url.Parse(r.sc.DSN)
	if err != nil {
		return "", err
	}
	if r.pgProxy, err = faultproxy.New(u.Host); err != nil {
		return "", err
	}
	r.closers = append(r.closers, func() { _ = r.pgProxy.Close() })
	if r.redisProx, err = faultproxy.New(r.redis.Addr()); err != nil {
		return "", err
	}
	r.closers = append(r.closers, func() { _ = r.redisProx.Close() })
	r.pgProxy.SetMaxConns(1024)
	r.redisProx.SetMaxConns(1024)
	u.Host = r.pgProxy.Addr()
	return u.String(), nil
}

func (r *soakRig) startInstances(ctx context.Context, pgDSN string, retention time.Duration) error {
	exe, err := benchenv.ServiceBinary()
	if err != nil {
		return err
	}
	logDir, err := os.MkdirTemp("", "seckill-soak-")
	if err != nil {
		return err
	}
	r.logDir = logDir
	if r.instances, err = chaosInstances(exe, logDir, r.sc.Env, pgDSN, r.redisProx.Addr(), 0); err != nil {
		return err
	}
	for _, in := range r.instances {
		r.closers = append(r.closers, func() { _ = in.LogFile.Close() })
		// Info level: a diagnosis shows the lines that name a reservation
		// that did not come to rest.
		in.Env = append(in.Env, "SECKILL_REQUEST_CLAIM_TTL="+retention.String(), "SECKILL_RESERVATION_RETENTION="+retention.String(),
			"SECKILL_ORDER_VIEW_TTL="+retention.String(), "SECKILL_LOG_LEVEL=info")
		in.CleanEnv = in.Env
		if err := in.Start(); err != nil {
			return err
		}
		r.closers = append(r.closers, in.Stop)
		r.bases = append(r.bases, "http://"+in.API)
	}
	for _, in := range r.instances {
		if err := in.WaitLive(ctx); err != nil {
			return err
		}
	}
	return nil
}

// SoakResult is result.json of a soak.
type SoakResult struct {
	Command   string    `json:"command"`
	StartedAt time.Time `json:"started_at"`
	Broker    string    `json:"broker"`
	Cores     int       `json:"cores"`
	GoVersion string    `json:"go_version"`
	Duration  string    `json:"duration"`
	// Retention is the services' Redis retentions (--retention).
	Retention  string         `json:"redis_retention"`
	Activities []soakActivity `json:"activities"`
	Faults     []soakFault    `json:"faults"`
	Samples    []soakSample   `json:"samples"`
	Trends     []soakTrend    `json:"trends"`
	// Violations counts invariant violations over every activity.
	Violations int64 `json:"violations"`
}

// soakActivity is one sale of the soak and its invariants at rest.
type soakActivity struct {
	ID           int64                    `json:"id"`
	Probe        bool                     `json:"probe,omitempty"`
	StartedAtS   float64                  `json:"started_at_s"`
	Acknowledged int                      `json:"acknowledged"`
	Paid         int64                    `json:"paid"`
	Canceled     int                      `json:"canceled"`
	BuyerCancels int64                    `json:"buyer_cancels"`
	RestS        float64                  `json:"rest_s"`
	Invariants   []salekit.InvariantCheck `json:"invariants"`
	Violations   int64                    `json:"violations"`
	Error        string                   `json:"error,omitempty"`
	// Diagnosis is what the soak read when the activity did not come to
	// rest (soak.diagnose).
	Diagnosis string `json:"diagnosis,omitempty"`
}

// soakFault is one injected fault: when it began, when its component was
// back, and the recovery: from then until the first order placed after
// it was created in PostgreSQL.
type soakFault struct {
	Name      string  `json:"name"`
	AtS       float64 `json:"at_s"`
	BackAtS   float64 `json:"back_at_s"`
	RecoveryS float64 `json:"recovery_s"`
	Error     string  `json:"error,omitempty"`
	// Diagnosis is what the soak read of the probe's activity when no
	// order got through after the fault (soak.diagnose).
	Diagnosis string `json:"diagnosis,omitempty"`
}

// Soak runs `seckill-bench chaos soak`: a new activity on sale every
// saleEvery (buyers over spread, some orders paid, some canceled by their
// buyer, the rest timing out), one fault of the list every faultEvery,
// each activity's invariants once it is at rest, the recovery after each
// fault, and the service's resources sampled over the whole run with the
// trend of each. It writes result.json and report.html and fails on an
// invariant violated, a recovery over --max-recovery, or a resource that
// grows.
func Soak(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseSoakOptions(args)
	if err != nil {
		return err
	}
	rig, err := startSoakRig(ctx, o.retention)
	if err != nil {
		return err
	}
	defer rig.close()
	if o.faults = rig.usableFaults(o.faults); len(o.faults) == 0 {
		return fmt.Errorf("no fault of the list applies to broker %s: %w", rig.cfg.Broker.Name, flag.ErrHelp)
	}
	res := SoakResult{Command: o.command, StartedAt: time.Now(), Broker: benchenv.BrokerText(rig.cfg), Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), Duration: o.duration.String(), Retention: o.retention.String()}
	fmt.Fprintf(stdout, "seckill-bench chaos soak: %s; a sale of %d units to %d buyers every %s, a fault every %s (%s), for %s; Redis retentions %s\nservice logs (kept): %s\n\n",
		res.Broker, o.stock, o.buyers, o.saleEvery, o.faultEvery, strings.Join(o.faults, ", "), o.duration, o.retention, rig.logDir)
	s := &soak{o: o, rig: rig, res: &res, out: stdout, t0: res.StartedAt}
	if err := s.run(ctx); err != nil {
		return err
	}
	return s.finish()
}

// usableFaults drops the faults of broker processes the local stack
// does not run for the chosen broker (RocketMQ's proxy on another).
func (r *soakRig) usableFaults(faults []string) []string {
	var out []string
	for _, f := range faults {
		if !faultsOwnProcess(f, r.cfg) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// soak is one running soak.
type soak struct {
	o     soakOptions
	rig   *soakRig
	res   *SoakResult
	out   io.Writer
	t0    time.Time
	mu    sync.Mutex // guards res and out
	probe *soakProbe
}

func (s *soak) since(t time.Time) float64 { return t.Sub(s.t0).Seconds() }

// run starts the sales and the sampler and injects the faults until the
// duration ends, then waits for every sale to come to rest.
func (s *soak) run(ctx context.Context) error {
	probe, err := newSoakProbe(ctx, s)
	if err != nil {
		return fmt.Errorf("the recovery probe's activity: %w", err)
	}
	s.probe = probe
	end := s.t0.Add(s.o.duration)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() { defer sampling.Done(); s.sample(sampleCtx) }()
	var sales sync.WaitGroup
	nextSale, nextFault, faultNo := s.t0, s.t0.Add(s.o.faultEvery), 0
	for ctx.Err() == nil && time.Now().Before(end) {
		if !time.Now().Before(nextSale) {
			sales.Add(1)
			go func(at time.Time) { defer sales.Done(); s.record(s.sale(ctx, at)) }(nextSale)
			nextSale = nextSale.Add(s.o.saleEvery)
		}
		if !time.Now().Before(nextFault) && nextFault.Before(end) {
			s.recordFault(s.fault(ctx, s.o.faults[faultNo%len(s.o.faults)]))
			faultNo++
			nextFault = nextFault.Add(s.o.faultEvery)
		}
		sleepUntil(ctx, minTime(nextSale, nextFault, end))
	}
	sales.Wait()
	stopSampling()
	sampling.Wait()
	s.record(s.probe.activity(ctx, s))
	return ctx.Err()
}

func minTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.Before(m) {
			m = t
		}
	}
	return m
}

// sleepUntil sleeps until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// record keeps one activity's result and prints its line.
func (s *soak) record(a soakActivity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Activities = append(s.res.Activities, a)
	s.res.Violations += a.Violations
	state := "ok"
	if a.Error != "" {
		state = "ERROR " + a.Error
	} else if a.Violations > 0 {
		state = fmt.Sprintf("VIOLATED %d: %s", a.Violations, violatedIDs(a.Invariants))
	}
	fmt.Fprintf(s.out, "%7.0fs activity %d: %d acknowledged, %d paid, %d canceled (%d by their buyer), at rest %.0fs after its start: %s\n",
		a.StartedAtS, a.ID, a.Acknowledged, a.Paid, a.Canceled, a.BuyerCancels, a.RestS, state)
	fmt.Fprint(s.out, a.Diagnosis)
}

func violatedIDs(checks []salekit.InvariantCheck) string {
	var ids []string
	for _, c := range checks {
		if c.Violations > 0 {
			ids = append(ids, c.ID)
		}
	}
	return strings.Join(ids, ",")
}

// recordFault keeps one fault's result and prints its line.
func (s *soak) recordFault(f soakFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.Faults = append(s.res.Faults, f)
	if f.Error != "" {
		fmt.Fprintf(s.out, "%7.0fs fault %s: ERROR %s\n%s", f.AtS, f.Name, f.Error, f.Diagnosis)
		return
	}
	fmt.Fprintf(s.out, "%7.0fs fault %s: back at %.0fs, recovery %.1fs\n", f.AtS, f.Name, f.BackAtS, f.RecoveryS)
}

// fault injects one fault and measures the recovery after it.
func (s *soak) fault(ctx context.Context, name string) soakFault {
	f := soakFault{Name: name, AtS: s.since(time.Now())}
	action, target, _ := strings.Cut(name, "-")
	fp := s.rig.redisProx
	if target == "postgres" {
		fp = s.rig.pgProxy
	}
	r := chaosRun{cfg: s.rig.cfg, scenario: name, down: s.o.down, stackScript: s.o.stackScript, stock: s.o.stock}
	if target == "redis" && !connectionFaults[action] {
		r.redis = s.rig.redis
	}
	backAt, err := injectFault(ctx, r, s.rig.instances, fp, new(atomic.Int64))
	if err != nil {
		f.Error = err.Error()
		return f
	}
	f.BackAtS = s.since(backAt)
	rec, err := s.probe.recovery(ctx, s, backAt)
	if err != nil {
		f.Error = err.Error()
		f.Diagnosis = s.diagnose(ctx, s.probe.id)
	}
	f.RecoveryS = rec.Seconds()
	return f
}

// finish computes the trends, writes the report and returns the verdict.
func (s *soak) finish() error {
	s.res.Trends = soakTrends(s.res.Samples, s.o.warmup.Seconds())
	slices.SortFunc(s.res.Activities, func(a, b soakActivity) int { return cmp.Compare(a.StartedAtS, b.StartedAtS) })
	jsonPath, htmlPath, err := runreport.WriteFiles(s.o.out, s.res, newSoakPage(*s.res))
	if err != nil {
		return err
	}
	writeTrends(s.out, s.res.Trends)
	fmt.Fprintf(s.out, "\nresult: %s\nreport: %s\n", jsonPath, htmlPath)
	var errs []error
	for _, a := range s.res.Activities {
		if a.Error != "" || a.Violations > 0 {
			errs = append(errs, fmt.Errorf("activity %d: %d violations %s", a.ID, a.Violations, a.Error))
		}
	}
	for _, f := range s.res.Faults {
		if f.Error != "" || (s.o.maxRecovery > 0 && f.RecoveryS > s.o.maxRecovery.Seconds()) {
			errs = append(errs, fmt.Errorf("fault %s at %.0fs: recovery %.1fs %s", f.Name, f.AtS, f.RecoveryS, f.Error))
		}
	}
	for _, t := range s.res.Trends {
		if t.Verdict == trendGrows {
			errs = append(errs, fmt.Errorf("%s grows: %s", t.Name, t.Detail))
		}
	}
	return errors.Join(errs...)
}
