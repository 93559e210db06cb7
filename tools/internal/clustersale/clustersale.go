package clustersale

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/api"
	redisadapter "github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/procstat"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// The faults `seckill-bench cluster-sale` can inject mid-sale: SIGKILL of
// one API instance, of one worker instance, of one broker of the RocketMQ
// cluster. Each comes back after --down (the instances restarted as a
// supervisor would, the broker by the stack).
const (
	faultAPI        = "api"
	faultWorkers    = "workers"
	faultBroker     = "broker"
	faultBrokerHang = "broker-hang"
)

// clusterSaleOptions are the flags of `seckill-bench cluster-sale`.
type clusterSaleOptions struct {
	stock, buyers, clients int
	lanes                  int
	apis, workers          int
	faults                 []string
	down, settle           time.Duration
	paymentTimeout         time.Duration
	payShare               float64
	idle                   time.Duration
}

// brokerFault kills one broker of the RocketMQ cluster by the pid its
// stack recorded and brings it back with restart, or, when hang is set,
// stops it (SIGSTOP: its connections stay open, the name server keeps
// routing to it) and lets it go on (SIGCONT).
type brokerFault struct {
	Name    string
	pidFile string
	restart func(ctx context.Context) error
	hang    bool
}

// clusterSaleRun is one run's setting: the options, the configuration the
// instances inherit, the service binary, the Redis Cluster's seed
// addresses, the broker to kill (nil: none) and the processes of the
// stack whose CPU is measured.
type clusterSaleRun struct {
	opts       clusterSaleOptions
	config     config.Config
	log        *slog.Logger
	exe        string
	redisAddrs []string
	broker     *brokerFault
	stackProcs []stackProc
	progress   io.Writer
}

// stackProc is a process of the stack measured by the run: its display
// name, its role in the capacity model (redis, broker, postgres) and its
// pid file; tree adds its children (PostgreSQL's backends).
type stackProc struct {
	name, role, pidFile string
	tree                bool
}

// Run runs a hot-SKU sale on the distributed shape: --api API
// instances behind a client-side spread, --workers worker instances, the
// Redis Cluster and the two-broker RocketMQ cluster of the local stack
// (make cluster-sale brings both up). Mid-sale one API instance, one
// worker instance and one broker are killed and brought back. Half the
// orders are paid, the rest time out and give their unit back. It prints
// the invariants, the per-instance share of the work and the CPU per
// accepted order of every process, and fails when an invariant is
// violated.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cluster-sale", flag.ContinueOnError)
	o := clusterSaleOptions{}
	fs.IntVar(&o.stock, "stock", 3000, "units of the hot SKU")
	fs.IntVar(&o.lanes, "lanes", 3, "Redis slots the hot SKU's stock is split over (stock_lanes; 1: one slot)")
	fs.IntVar(&o.buyers, "buyers", 9000, "buyers (each retries its one request_id until a definite answer)")
	fs.IntVar(&o.clients, "clients", 48, "concurrent buyers")
	fs.IntVar(&o.apis, "api", 3, "API instances (seckill serve --role api)")
	fs.IntVar(&o.workers, "workers", 2, "worker instances (seckill serve --role workers)")
	faults := fs.String("faults", "api,workers,broker", "faults injected mid-sale, comma-separated: api, workers, broker (SIGKILL, restarted), broker-hang (SIGSTOP, then SIGCONT); empty for none")
	fs.DurationVar(&o.down, "down", 5*time.Second, "how long a killed instance or broker stays down")
	fs.DurationVar(&o.settle, "settle", 150*time.Second, "how long to wait for every acknowledged reservation and every timeout to resolve")
	fs.DurationVar(&o.paymentTimeout, "payment-timeout", 20*time.Second, "the activity's payment timeout (unpaid orders are canceled after it)")
	fs.Float64Var(&o.payShare, "pay-share", 0.5, "share of the created orders that are paid (the others time out)")
	fs.DurationVar(&o.idle, "idle", 5*time.Second, "how long every process's idle CPU is measured before the sale (0: not measured)")
	singleRedis := fs.Bool("single-redis", false, "use the stack's single Redis even when SECKILL_REDIS_CLUSTER_ADDRS names a cluster (the smallest shape of docs/capacity.md)")
	stackScript := fs.String("stack", "deploy/local/stack.sh", "the local stack script (restarts the killed broker)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.faults, err = parseFaults(*faults); err != nil {
		return err
	}
	if o.stock <= 0 || o.buyers <= 0 || o.clients <= 0 || o.apis <= 0 || o.workers <= 0 || o.payShare < 0 || o.payShare > 1 {
		return fmt.Errorf("--stock, --buyers, --clients, --api and --workers must be > 0 and --pay-share in [0, 1]: %w", flag.ErrHelp)
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	run := clusterSaleRun{opts: o, config: cfg, log: log, progress: os.Stderr}
	if run.exe, err = benchenv.ServiceBinary(); err != nil {
		return err
	}
	// The Redis Cluster when the stack exports it, else the single Redis
	// (the smallest shape, for the capacity model's per-order costs).
	if run.redisAddrs = redisadapter.SplitAddrs(os.Getenv("SECKILL_REDIS_CLUSTER_ADDRS")); len(run.redisAddrs) == 0 || *singleRedis {
		run.redisAddrs = []string{cfg.Redis.Addr}
	}
	if cfg.Broker.Name != rocketmq.PlugName {
		return fmt.Errorf("cluster-sale runs on RocketMQ (SECKILL_BROKER is %s): %w", cfg.Broker.Name, flag.ErrHelp)
	}
	clusterDir := os.Getenv("SECKILL_ROCKETMQ_CLUSTER_DIR")
	if slices.Contains(o.faults, faultBroker) && slices.Contains(o.faults, faultBrokerHang) {
		return fmt.Errorf("--faults: %s and %s exclude each other: %w", faultBroker, faultBrokerHang, flag.ErrHelp)
	}
	if slices.Contains(o.faults, faultBroker) || slices.Contains(o.faults, faultBrokerHang) {
		if clusterDir == "" {
			return errors.New("the broker faults need the RocketMQ cluster mode of the local stack (SECKILL_ROCKETMQ_CLUSTER_DIR is not set): run `make cluster-sale`, or --faults api,workers")
		}
		script := *stackScript
		run.broker = &brokerFault{Name: "broker-b", pidFile: filepath.Join(clusterDir, "run", "broker-b.pid"),
			restart: func(ctx context.Context) error {
				up := exec.CommandContext(ctx, script, "up")
				up.Env = append(os.Environ(), "SECKILL_STACK_ROCKETMQ_CLUSTER=1")
				if out, err := up.CombinedOutput(); err != nil {
					return fmt.Errorf("%s up: %w\n%s", script, err, out)
				}
				return nil
			},
			hang: slices.Contains(o.faults, faultBrokerHang)}
	}
	run.stackProcs = clusterStackProcs(os.Getenv("SECKILL_STACK_DIR"), clusterDir, len(run.redisAddrs) > 1)
	res, err := runClusterSale(ctx, run)
	if err != nil {
		return err
	}
	res.Write(stdout, run)
	if n := res.violations(); n > 0 {
		return fmt.Errorf("%d invariant violation(s)", n)
	}
	return nil
}

// parseFaults reads --faults.
func parseFaults(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case faultAPI, faultWorkers, faultBroker, faultBrokerHang:
			out = append(out, f)
		default:
			return nil, fmt.Errorf("--faults: unknown fault %q (api, workers, broker, broker-hang): %w", f, flag.ErrHelp)
		}
	}
	return out, nil
}

// clusterStackProcs are the stack's processes a sale measures: the Redis
// Cluster's masters (redisCluster) or the single Redis, and PostgreSQL,
// under stackDir/run; the RocketMQ cluster's name server, brokers and
// proxy under clusterDir/run, or the local mode's name server and proxy
// (its broker embedded) when clusterDir is "".
func clusterStackProcs(stackDir, clusterDir string, redisCluster bool) []stackProc {
	var out []stackProc
	redises := []string{"redis"}
	if redisCluster {
		redises = []string{"redis-c1", "redis-c2", "redis-c3"}
	}
	for _, n := range redises {
		out = append(out, stackProc{name: n, role: "redis", pidFile: filepath.Join(stackDir, "run", n+".pid")})
	}
	brokers, dir := []string{"proxy", "namesrv"}, stackDir
	if clusterDir != "" {
		brokers, dir = []string{"proxy", "broker-a", "broker-b", "namesrv"}, clusterDir
	}
	for _, n := range brokers {
		out = append(out, stackProc{name: "rmq " + n, role: "broker", pidFile: filepath.Join(dir, "run", n+".pid")})
	}
	return append(out, stackProc{name: "postgres", role: "postgres", pidFile: filepath.Join(stackDir, "run", "postgres.pid"), tree: true})
}

// clusterInstance is a `seckill serve` of the run with its role and what
// it did: the API instances' answers counted by the buyers, the workers'
// handled deliveries read from their /metrics (summed over restarts).
type clusterInstance struct {
	*benchenv.Instance
	role string
	// calls and accepted are the PlaceOrder calls this API instance
	// answered and those it acknowledged.
	calls, accepted atomic.Int64
	// cmu guards the worker counters and killed: base holds the
	// deliveries of ended lifetimes, last the latest reading of the
	// current one.
	cmu                 sync.Mutex
	baseAll, baseCreate float64
	lastAll, lastCreate float64
	killed              bool
	cpu                 procCPU
}

// procCPU sums one instance's CPU over its lifetimes (guarded by the
// instance's cmu).
type procCPU struct {
	ended uint64 // ticks of the lifetimes that ended (the last reading of each)
	pid   int
	last  uint64 // the latest reading of the current lifetime
}

func (c *procCPU) read() {
	if t, _, err := procstat.Ticks(c.pid, false); err == nil {
		c.last = t
	}
}

// restartAs records that the instance's process ended and pid replaced it.
func (c *procCPU) restartAs(pid int) {
	c.ended += c.last
	c.pid, c.last = pid, 0
}

// clusterSaleResult is what a run measured and checked.
type clusterSaleResult struct {
	acknowledged, created, released, paid, timedOut int
	invariants                                      []salekit.InvariantCheck
	apis, workers                                   []*clusterInstance
	redisCalls                                      map[string]int64 // scripts run per master during the run
	// saleSeconds runs from the first buyer to the last acknowledgement,
	// ordersSeconds to the last order created, windowSeconds (the CPU
	// window) until every acknowledged reservation was resolved.
	saleSeconds, ordersSeconds, windowSeconds float64
	faultAt                                   time.Duration // since the sale started
	recovery                                  time.Duration
	cpu                                       []cpuShare
	lastOrderAfterLastAck                     time.Duration
	// answeredSeconds runs from the first buyer to the last answer.
	answeredSeconds float64
}

// cpuShare is one process's CPU over the run's window and while idle.
type cpuShare struct {
	name, role string
	seconds    float64
	idleCores  float64
}

func (r clusterSaleResult) violations() int64 {
	var n int64
	for _, c := range r.invariants {
		n += c.Violations
	}
	return n
}

// runClusterSale runs one cluster sale: the instances on a scratch
// database, Redis namespace and broker namespace, the activity, the sale
// with its faults (sellCluster), and the measures at rest
// (settleClusterSale).
func runClusterSale(ctx context.Context, r clusterSaleRun) (clusterSaleResult, error) {
	res := clusterSaleResult{}
	o := r.opts
	env, err := benchenv.NewNamespace(ctx, r.config, r.log)
	if err != nil {
		return res, err
	}
	defer env.Close()
	dsn, dropDB, err := benchenv.ScratchDatabase(ctx, string(r.config.Postgres.DSN), r.log)
	if err != nil {
		return res, err
	}
	defer dropDB()
	rc := goredis.NewUniversalClient(&goredis.UniversalOptions{Addrs: r.redisAddrs, Password: string(r.config.Redis.Password)})
	defer func() { _ = rc.Close() }()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "cs" + hex.EncodeToString(b)
	defer benchenv.PurgeClusterNamespace(context.WithoutCancel(ctx), rc, ns)
	all, err := r.startInstances(ctx, env, dsn, ns, &res)
	defer func() {
		for _, in := range all {
			in.Stop()
			_ = in.LogFile.Close()
		}
	}()
	if err != nil {
		return res, err
	}
	httpc := &http.Client{Timeout: 10 * time.Second}
	s := &clusterSaleRound{r: r, res: &res, httpc: httpc, secret: []byte(r.config.AuthSecret), activityID: salekit.BenchActivityID()}
	if err := salekit.CreateSaleActivity(ctx, httpc, "http://"+res.apis[0].API, s.secret, s.activityID, int64(o.stock), o.paymentTimeout, o.lanes); err != nil {
		return res, err
	}
	redisBefore, err := redisScriptCalls(ctx, rc)
	if err != nil {
		return res, err
	}
	s.meters = r.meters(all)
	s.measureIdle()
	atStart := readMeters(s.meters)
	stopScrape := scrapeDeliveries(ctx, httpc, res.workers)
	defer stopScrape()
	if s.pool, err = pgxpool.New(ctx, dsn); err != nil {
		return res, err
	}
	defer s.pool.Close()
	for _, in := range res.apis {
		s.bases = append(s.bases, "http://"+in.API)
	}
	stopPaying, err := s.startPayer(ctx)
	if err != nil {
		return res, err
	}
	defer stopPaying()
	if err := s.sell(ctx); err != nil {
		return res, err
	}
	redisAfter, err := redisScriptCalls(ctx, rc)
	if err != nil {
		return res, err
	}
	res.redisCalls = map[string]int64{}
	for addr, n := range redisAfter {
		res.redisCalls[addr] = n - redisBefore[addr]
	}
	return res, s.settle(ctx, atStart, stopPaying)
}

// startInstances starts the API and worker instances of the run on the
// scratch database dsn, Redis namespace ns and broker namespace env, and
// waits until each is live and ready. It returns every instance it
// started, also on an error, for the caller to stop.
func (r clusterSaleRun) startInstances(ctx context.Context, env *benchenv.Namespace, dsn, ns string, res *clusterSaleResult) ([]*clusterInstance, error) {
	logDir, err := os.MkdirTemp("", "seckill-cluster-sale-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(r.progress, "cluster-sale: service logs in %s\n", logDir)
	start := func(role string, i int) (*clusterInstance, error) {
		name := fmt.Sprintf("%s-%d", role, i)
		in, err := benchenv.NewInstance(name, r.exe, logDir,
			"SECKILL_ROLE="+role, "SECKILL_PG_DSN="+dsn,
			"SECKILL_REDIS_ADDR="+strings.Join(r.redisAddrs, ","), "SECKILL_REDIS_DB=0", "SECKILL_REDIS_NAMESPACE="+ns,
			"SECKILL_INSTANCE_ID="+name+"-"+env.Prefix(),
			"SECKILL_RATE_BURST=1000000", "SECKILL_RATE_PER_SECOND=1000000", "SECKILL_FAILPOINTS=", "SECKILL_LOG_LEVEL=warn")
		if err != nil {
			return nil, err
		}
		in.Env = append(in.Env, env.ServiceEnv()...)
		in.CleanEnv = in.Env
		if err := in.Start(); err != nil {
			_ = in.LogFile.Close()
			return nil, err
		}
		ci := &clusterInstance{Instance: in, role: role}
		ci.cpu.pid = in.PID()
		return ci, nil
	}
	var all []*clusterInstance
	for _, shape := range []struct {
		role string
		n    int
		into *[]*clusterInstance
	}{{config.RoleAPI, r.opts.apis, &res.apis}, {config.RoleWorkers, r.opts.workers, &res.workers}} {
		for i := range shape.n {
			in, err := start(shape.role, i)
			if err != nil {
				return all, err
			}
			all, *shape.into = append(all, in), append(*shape.into, in)
		}
	}
	for _, in := range all {
		if err := in.WaitLive(ctx); err != nil {
			return all, err
		}
	}
	for _, in := range all {
		if err := salekit.WaitReady(ctx, "http://"+in.Ops+"/readyz", 90*time.Second); err != nil {
			return all, fmt.Errorf("%s: %w (log: %s)", in.Name, err, in.LogFile.Name())
		}
	}
	return all, nil
}

// scrapeDeliveries reads the workers' delivery counters every second until
// the returned stop is called.
func scrapeDeliveries(ctx context.Context, httpc *http.Client, workers []*clusterInstance) (stop func()) {
	scrapeCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			for _, w := range workers {
				w.scrapeDeliveries(scrapeCtx, httpc)
			}
			select {
			case <-scrapeCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// clusterSaleRound is one cluster sale under way: what its phases share.
type clusterSaleRound struct {
	r          clusterSaleRun
	res        *clusterSaleResult
	httpc      *http.Client
	secret     []byte
	activityID int64
	bases      []string // the API instances' base URLs
	pool       *pgxpool.Pool
	meters     []*meter
	pay        *salekit.Payer
	answers    []salekit.BuyerAnswer
	// t0 is the first buyer's start; lastAck the last acknowledgement;
	// backAt when every faulted process was back.
	t0, lastAck, backAt time.Time
}

// measureIdle records every process's CPU while nothing is sold (--idle):
// the fixed cost of the shape, apart from the work per order.
func (s *clusterSaleRound) measureIdle() {
	if s.r.opts.idle <= 0 {
		return
	}
	before := readMeters(s.meters)
	time.Sleep(s.r.opts.idle)
	for i, v := range readMeters(s.meters) {
		s.meters[i].idleCores = (v - before[i]) / s.r.opts.idle.Seconds()
	}
}

// startPayer starts paying a share of the orders through the payment side
// while the others run into their timeout; stop (idempotent) ends it.
func (s *clusterSaleRound) startPayer(ctx context.Context) (stop func(), err error) {
	payTok, err := api.MintScopedToken(s.secret, 900_000_001, []string{api.ScopePayment}, time.Hour, time.Now())
	if err != nil {
		return nil, err
	}
	s.pay = &salekit.Payer{HTTP: s.httpc, Bases: s.bases, Pool: s.pool, ActivityID: s.activityID, To: s.r.opts.payShare, Token: payTok}
	payCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.pay.Run(payCtx) })
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }, nil
}

// sell runs the sale: buyers retry their one request_id across the API
// instances until a definite answer; once a third of the stock was
// acknowledged the faults are injected.
func (s *clusterSaleRound) sell(ctx context.Context) error {
	o, res := s.r.opts, s.res
	countAnswer := func(i int, acknowledged bool) {
		res.apis[i].calls.Add(1)
		if acknowledged {
			res.apis[i].accepted.Add(1)
		}
	}
	s.t0 = time.Now()
	s.answers = make([]salekit.BuyerAnswer, o.buyers)
	var next, acknowledged, lastAnswer, lastAck atomic.Int64
	saleCtx, stopSale := context.WithTimeout(ctx, o.down+o.settle)
	defer stopSale()
	var wg sync.WaitGroup
	for range o.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.buyers {
					return
				}
				s.answers[i] = salekit.BuyUntilDefinite(saleCtx, s.httpc, s.bases, s.secret, s.activityID, int64(2_000_000+i),
					fmt.Sprintf("cs-%d", i), countAnswer)
				now := time.Now().UnixNano()
				if s.answers[i].OrderID != "" {
					acknowledged.Add(1)
					lastAck.Store(now)
				}
				lastAnswer.Store(now)
			}
		})
	}
	for acknowledged.Load() < int64(o.stock/3) && saleCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	res.faultAt = time.Since(s.t0)
	backAt, err := s.r.injectClusterFaults(ctx, res.apis, res.workers)
	if err != nil {
		stopSale()
		wg.Wait()
		return err
	}
	wg.Wait()
	s.backAt, s.lastAck = backAt, time.Unix(0, lastAck.Load())
	res.answeredSeconds = time.Unix(0, lastAnswer.Load()).Sub(s.t0).Seconds()
	res.saleSeconds = s.lastAck.Sub(s.t0).Seconds()
	return nil
}

// settle waits until every acknowledged reservation is resolved, takes
// the CPU window from atStart, stops the payer, waits for the activity at
// rest (every unpaid order canceled by its timeout, its unit back) and
// checks I1-I7.
func (s *clusterSaleRound) settle(ctx context.Context, atStart []float64, stopPaying func()) error {
	o, res := s.r.opts, s.res
	ids := salekit.AcknowledgedIDs(s.answers)
	res.acknowledged = len(ids)
	deadline := time.Now().Add(o.settle)
	var open int
	for {
		var err error
		res.created, res.released, open, err = benchenv.ResolveIDs(ctx, s.pool, ids)
		if err != nil {
			return err
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The CPU window: from the first buyer until every acknowledged
	// reservation was resolved (the consumers' work included).
	res.windowSeconds = time.Since(s.t0).Seconds()
	for i, v := range readMeters(s.meters) {
		m := s.meters[i]
		res.cpu = append(res.cpu, cpuShare{name: m.name, role: m.role, seconds: v - atStart[i], idleCores: m.idleCores})
	}
	var lastOrder time.Time
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(created_at), now()) FROM orders WHERE activity_id = $1`, s.activityID).Scan(&lastOrder); err != nil {
		return err
	}
	res.ordersSeconds = lastOrder.Sub(s.t0).Seconds()
	res.lastOrderAfterLastAck = lastOrder.Sub(s.lastAck)
	res.recovery = max(0, lastOrder.Sub(s.backAt))
	stopPaying()
	res.paid = int(s.pay.Paid.Load())
	if err := s.waitAtRest(ctx); err != nil {
		return err
	}
	var err error
	res.invariants, res.timedOut, err = salekit.CheckActivityInvariants(ctx, s.pool, s.httpc, s.bases, s.secret, s.activityID, o.stock, s.answers, open)
	return err
}

// waitAtRest waits, up to the payment timeout and --settle, until no order
// of the activity is still open and its books show no drift and no
// release in flight.
func (s *clusterSaleRound) waitAtRest(ctx context.Context) error {
	deadline := time.Now().Add(s.r.opts.paymentTimeout + s.r.opts.settle)
	for {
		var pending int64
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE activity_id = $1 AND status NOT IN ('PAID', 'CANCELED')`,
			s.activityID).Scan(&pending); err != nil {
			return err
		}
		rep, repErr := salekit.StockReport(ctx, s.httpc, "http://"+s.res.apis[1%len(s.res.apis)].API, s.secret, s.activityID)
		if (pending == 0 && repErr == nil && rep.GetDrift() == 0 && rep.GetReleasesInFlight() == 0) || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// meter reads one process's CPU seconds: a process of the stack, a
// service instance (over its lifetimes) or this load generator.
type meter struct {
	name, role string
	read       func() float64
	idleCores  float64
}

// meters lists the run's processes: the stack's (those whose pid file
// exists), the instances and this process.
func (r clusterSaleRun) meters(instances []*clusterInstance) []*meter {
	var out []*meter
	for _, sp := range r.stackProcs {
		pid, err := benchenv.PIDFromFile(sp.pidFile)
		if err != nil {
			continue
		}
		// A process the run kills (the broker) comes back under a new pid
		// in the same pid file: ended keeps the lifetimes that ended.
		p := &benchenv.SampledProcess{Name: sp.name, PID: pid, Tree: sp.tree}
		var ended uint64
		out = append(out, &meter{name: sp.name, role: sp.role, read: func() float64 {
			t, alive := p.Sample()
			p.Last = t
			if !alive {
				if next, err := benchenv.PIDFromFile(sp.pidFile); err == nil && next != p.PID {
					ended += t
					p = &benchenv.SampledProcess{Name: sp.name, PID: next, Tree: sp.tree}
					t, _ = p.Sample()
					p.Last = t
				}
			}
			return float64(ended+t) / procstat.ClockTicks
		}})
	}
	for _, in := range instances {
		out = append(out, &meter{name: in.Name, role: in.role, read: func() float64 {
			in.cmu.Lock()
			defer in.cmu.Unlock()
			in.cpu.read()
			return float64(in.cpu.ended+in.cpu.last) / procstat.ClockTicks
		}})
	}
	self := &benchenv.SampledProcess{Name: "load generator", PID: os.Getpid()}
	return append(out, &meter{name: self.Name, role: "load", read: func() float64 {
		t, _ := self.Sample()
		return float64(t) / procstat.ClockTicks
	}})
}

// readMeters reads every meter once.
func readMeters(ms []*meter) []float64 {
	out := make([]float64, len(ms))
	for i, m := range ms {
		out[i] = m.read()
	}
	return out
}

// injectClusterFaults kills the configured victims (API instance 0, worker
// instance 0, the broker), waits --down, brings them back and returns when
// all are back.
func (r clusterSaleRun) injectClusterFaults(ctx context.Context, apis, workers []*clusterInstance) (time.Time, error) {
	var victims []*clusterInstance
	if slices.Contains(r.opts.faults, faultAPI) {
		victims = append(victims, apis[0])
	}
	if slices.Contains(r.opts.faults, faultWorkers) {
		victims = append(victims, workers[0])
	}
	for _, v := range victims {
		v.cmu.Lock()
		v.cpu.read()
		v.cmu.Unlock()
		v.KillAndWait()
		v.cmu.Lock()
		v.killed = true
		v.cmu.Unlock()
		fmt.Fprintf(r.progress, "cluster-sale: killed %s (SIGKILL)\n", v.Name)
	}
	var brokerPID int
	if r.broker != nil {
		pid, err := benchenv.PIDFromFile(r.broker.pidFile)
		if err != nil {
			return time.Time{}, fmt.Errorf("pid of %s: %w", r.broker.Name, err)
		}
		sig, what := syscall.SIGKILL, "killed"
		if r.broker.hang {
			sig, what = syscall.SIGSTOP, "hung"
			// Never leave the stack's broker stopped, whatever happens next.
			defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return time.Time{}, fmt.Errorf("%s %s (pid %d): %w", sig, r.broker.Name, pid, err)
		}
		brokerPID = pid
		fmt.Fprintf(r.progress, "cluster-sale: %s %s (%s, pid %d)\n", what, r.broker.Name, sig, pid)
	}
	if len(victims) == 0 && r.broker == nil {
		return time.Now(), nil
	}
	time.Sleep(r.opts.down)
	for _, v := range victims {
		v.workerRestarted()
		if err := v.Start(); err != nil {
			return time.Time{}, err
		}
		v.cmu.Lock()
		v.cpu.restartAs(v.PID())
		v.cmu.Unlock()
	}
	switch {
	case r.broker != nil && r.broker.hang:
		if err := syscall.Kill(brokerPID, syscall.SIGCONT); err != nil {
			return time.Time{}, fmt.Errorf("SIGCONT %s (pid %d): %w", r.broker.Name, brokerPID, err)
		}
		fmt.Fprintf(r.progress, "cluster-sale: %s goes on (SIGCONT)\n", r.broker.Name)
	case r.broker != nil:
		if err := salekit.WaitGone(ctx, brokerPID); err != nil {
			return time.Time{}, err
		}
		if err := r.broker.restart(ctx); err != nil {
			return time.Time{}, fmt.Errorf("restart %s: %w", r.broker.Name, err)
		}
		fmt.Fprintf(r.progress, "cluster-sale: %s is back\n", r.broker.Name)
	}
	for _, v := range victims {
		if err := v.WaitLive(ctx); err != nil {
			return time.Time{}, err
		}
		fmt.Fprintf(r.progress, "cluster-sale: %s is back\n", v.Name)
	}
	return time.Now(), nil
}

// workerRestarted moves the counters of the ended lifetime to the base.
func (in *clusterInstance) workerRestarted() {
	in.cmu.Lock()
	defer in.cmu.Unlock()
	in.baseAll += in.lastAll
	in.baseCreate += in.lastCreate
	in.lastAll, in.lastCreate = 0, 0
}

// scrapeDeliveries reads the worker's mq_consume_total: all handled
// deliveries and those of the order-create group.
func (in *clusterInstance) scrapeDeliveries(ctx context.Context, httpc *http.Client) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.Ops+"/metrics", nil)
	if err != nil {
		return
	}
	res, err := httpc.Do(req)
	if err != nil {
		return
	}
	defer func() { _ = res.Body.Close() }()
	var all, create float64
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "mq_consume_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		all += v
		if strings.Contains(line, string(ports.GroupOrderCreate)) {
			create += v
		}
	}
	if sc.Err() != nil || res.StatusCode != http.StatusOK {
		return
	}
	in.cmu.Lock()
	in.lastAll, in.lastCreate = all, create
	in.cmu.Unlock()
}

// deliveries are the worker's handled deliveries over its lifetimes.
func (in *clusterInstance) deliveries() (all, create float64) {
	in.cmu.Lock()
	defer in.cmu.Unlock()
	return in.baseAll + in.lastAll, in.baseCreate + in.lastCreate
}

// Write prints the run's report: the invariants, the per-instance share of
// the work, Redis per master, and CPU per accepted order by process.
func (r clusterSaleResult) Write(w io.Writer, run clusterSaleRun) {
	r.writeHeader(w, run)
	r.writeInvariants(w)
	r.writeInstances(w)
	r.writeRedisMasters(w)
	r.writeCPU(w)
}

// writeHeader prints the run's setting (shape, Redis, broker, faults) and
// its headline figures: the counts and when the selling ended.
func (r clusterSaleResult) writeHeader(w io.Writer, run clusterSaleRun) {
	o := run.opts
	faults := "none"
	if len(o.faults) > 0 {
		faults = strings.Join(o.faults, ", ")
	}
	redisText := "Redis " + run.redisAddrs[0]
	if len(run.redisAddrs) > 1 {
		redisText = "Redis Cluster " + strings.Join(run.redisAddrs, ",")
	}
	fmt.Fprintf(w, "seckill-bench cluster-sale: %d units in %d stock lanes, %d buyers, %d clients; %d API + %d worker instances; %s; %s\n",
		o.stock, o.lanes, o.buyers, o.clients, o.apis, o.workers, redisText, benchenv.BrokerText(run.config))
	fmt.Fprintf(w, "faults at %.1fs (a third of the stock acknowledged): %s, down %s\n\n", r.faultAt.Seconds(), faults, o.down)
	fmt.Fprintf(w, "acknowledged %d, orders %d, rejected %d; paid %d, canceled by timeout %d\n", r.acknowledged, r.created, r.released, r.paid, r.timedOut)
	fmt.Fprintf(w, "selling: last acknowledgement at %.1fs (%.0f acknowledged/s), every buyer answered at %.1fs; last order %.2fs after the last acknowledgement, %.1fs after the faults healed\n\n",
		r.saleSeconds, float64(r.acknowledged)/max(r.saleSeconds, 0.001), r.answeredSeconds, r.lastOrderAfterLastAck.Seconds(), r.recovery.Seconds())
}

// writeInvariants prints one line per invariant with its verdict.
func (r clusterSaleResult) writeInvariants(w io.Writer) {
	fmt.Fprintln(w, "invariants:")
	for _, c := range r.invariants {
		status := "ok"
		if c.Violations > 0 {
			status = fmt.Sprintf("VIOLATED (%d)", c.Violations)
		}
		fmt.Fprintf(w, "  %-3s %-34s %-14s %s\n", c.ID, c.Name, status, c.Detail)
	}
}

// writeInstances prints each API instance's share of the PlaceOrder
// answers and each worker instance's share of the handled deliveries.
func (r clusterSaleResult) writeInstances(w io.Writer) {
	fmt.Fprintln(w, "\nAPI instances (PlaceOrder answers):")
	var calls int64
	for _, in := range r.apis {
		calls += in.calls.Load()
	}
	for _, in := range r.apis {
		fmt.Fprintf(w, "  %-10s %7d answers (%4.1f %%), %6d acknowledged%s\n", in.Name, in.calls.Load(),
			100*float64(in.calls.Load())/max(float64(calls), 1), in.accepted.Load(), killedText(in))
	}
	fmt.Fprintln(w, "worker instances (handled deliveries, all groups / order-create):")
	var deliveries float64
	for _, in := range r.workers {
		a, _ := in.deliveries()
		deliveries += a
	}
	for _, in := range r.workers {
		a, c := in.deliveries()
		fmt.Fprintf(w, "  %-10s %7.0f (%4.1f %%) / %6.0f%s\n", in.Name, a, 100*a/max(deliveries, 1), c, killedText(in))
	}
}

// writeRedisMasters prints the scripts each Redis master ran during the
// sale and its share of them, masters in address order.
func (r clusterSaleResult) writeRedisMasters(w io.Writer) {
	fmt.Fprintln(w, "Redis masters (scripts run during the sale):")
	addrs := make([]string, 0, len(r.redisCalls))
	for a := range r.redisCalls {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	var scripts int64
	for _, n := range r.redisCalls {
		scripts += n
	}
	for _, a := range addrs {
		fmt.Fprintf(w, "  %-16s %7d (%4.1f %%)\n", a, r.redisCalls[a], 100*float64(r.redisCalls[a])/max(float64(scripts), 1))
	}
}

// cpuAgg sums CPU seconds and idle cores over processes.
type cpuAgg struct{ seconds, idle float64 }

// writeCPU prints the CPU table over the run's window: per process, per
// role and for all processes, in seconds, idle cores and microseconds per
// acknowledged order (all and work, the idle rate subtracted), then the
// cores busy and the order rate.
func (r clusterSaleResult) writeCPU(w io.Writer) {
	fmt.Fprintf(w, "\nCPU from the first buyer until every acknowledged reservation was resolved (%.1fs), per acknowledged order;\n", r.windowSeconds)
	fmt.Fprintln(w, "work = CPU minus the process's idle rate over the window:")
	fmt.Fprintf(w, "  %-16s %-9s %8s %10s %12s %12s\n", "process", "role", "cpu s", "idle cores", "us/order", "work us/ord")
	byRole := map[string]*cpuAgg{}
	var total cpuAgg
	acked := max(float64(r.acknowledged), 1)
	for _, c := range r.cpu {
		a := byRole[c.role]
		if a == nil {
			a = &cpuAgg{}
			byRole[c.role] = a
		}
		a.seconds += c.seconds
		a.idle += c.idleCores
		total.seconds += c.seconds
		total.idle += c.idleCores
		fmt.Fprintf(w, "  %-16s %-9s %8.2f %10.3f %12.0f %12.0f\n", c.name, c.role, c.seconds, c.idleCores,
			1e6*c.seconds/acked, 1e6*max(0, c.seconds-c.idleCores*r.windowSeconds)/acked)
	}
	for _, role := range []string{config.RoleAPI, "redis", "broker", config.RoleWorkers, "postgres", "load"} {
		a := byRole[role]
		if a == nil {
			continue
		}
		fmt.Fprintf(w, "  role %-20s %8.2f %10.3f %12.0f %12.0f\n", role, a.seconds, a.idle,
			1e6*a.seconds/acked, 1e6*max(0, a.seconds-a.idle*r.windowSeconds)/acked)
	}
	fmt.Fprintf(w, "  %-25s %8.2f %10.3f %12.0f %12.0f\n", "all processes", total.seconds, total.idle,
		1e6*total.seconds/acked, 1e6*max(0, total.seconds-total.idle*r.windowSeconds)/acked)
	fmt.Fprintf(w, "  %.2f cores busy over the window; orders %.0f/s from the first buyer to the last order (%.1fs)\n",
		total.seconds/max(r.windowSeconds, 0.001), float64(r.created)/max(r.ordersSeconds, 0.001), r.ordersSeconds)
}

func killedText(in *clusterInstance) string {
	in.cmu.Lock()
	defer in.cmu.Unlock()
	if in.killed {
		return "  (killed mid-sale and restarted)"
	}
	return ""
}

// redisScriptCalls reads, per master, how many scripts it ran
// (INFO commandstats: evalsha and eval calls).
func redisScriptCalls(ctx context.Context, rc goredis.UniversalClient) (map[string]int64, error) {
	sums, err := benchenv.SumMasterInfo(ctx, rc, "commandstats", func(line string) float64 {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				v, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
				return float64(v)
			}
		}
		return 0
	})
	out := make(map[string]int64, len(sums))
	for addr, v := range sums {
		out[addr] = int64(v)
	}
	return out, err
}
