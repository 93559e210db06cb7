package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
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

	redisadapter "github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/faultproxy"
	"github.com/seckill-dev/seckill/adapters/testkit/pgpair"
	"github.com/seckill-dev/seckill/adapters/testkit/rediscluster"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/deploy/devstack"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// chaosScenarios are the faults `seckill-bench chaos` knows: kill-X sends
// SIGKILL and restarts X after the outage; pause-X sends SIGSTOP and
// SIGCONT after it. X is one of the two service instances ("service") or a
// process of the local stack (redis, postgres, namesrv, proxy; "broker" is
// the chosen broker's main process, whichever broker it is). delay-X
// (200 ms per chunk), blackhole-X (nothing forwarded, connections kept)
// and reset-X (every connection reset) act on the services' connections
// to redis or postgres through a fault proxy for the outage.
// crash-consumers runs the whole sale with consumer processes that crash
// at random points between receive and acknowledge (each instance is
// restarted whenever it dies) and reports how many crashes it survived.
// failover-postgres runs the sale on a PostgreSQL pair of its own (a
// primary and a synchronous standby, testkit/pgpair; the services' DSN
// names both with target_session_attrs=read-write), kills the primary
// mid-sale and promotes the standby; lagfailover-postgres pauses the
// standby's replay before the sale, so the standby promoted lags by
// everything before the fault (replay only: with synchronous commits it
// has flushed every acknowledged commit, and the promotion replays it).
// The old primary is never started again. failover-rediscluster runs the
// sale on a Redis Cluster of its own with a replica per master
// (testkit/rediscluster) and kills the master serving the sale's SKU
// mid-sale, which the cluster replaces by its replica;
// switchover-rediscluster has that replica take over by a manual
// CLUSTER FAILOVER instead.
var chaosScenarios = []string{
	"kill-service", "kill-redis", "kill-postgres", "kill-proxy", "kill-namesrv", "kill-broker",
	"pause-service", "pause-redis", "pause-postgres", "pause-proxy", "pause-broker",
	"delay-redis", "blackhole-redis", "reset-redis", "delay-postgres", "blackhole-postgres", "reset-postgres",
	"crash-consumers", "restore-redis", "failover-postgres", "lagfailover-postgres",
	"failover-rediscluster", "switchover-rediscluster",
}

// failovers are the scenario actions that promote a standby of a
// PostgreSQL pair of the scenario's own.
var failovers = map[string]bool{"failover": true, "lagfailover": true}

// consumerCrashes is the failpoint spec of crash-consumers: each consumer
// transaction may end the process inside the transaction or after the
// commit, before the acknowledgement.
const consumerCrashes = "consumer.in_tx=exit(0.1);consumer.after_commit=exit(0.1)"

// connectionFaults are the scenario actions applied to the service's
// connections through a fault proxy instead of to a process.
var connectionFaults = map[string]bool{"delay": true, "blackhole": true, "reset": true}

// Run runs a sale against two service processes sharing the local stack
// while one fault is injected per scenario, then checks the history of
// every buyer's answers against PostgreSQL and prints one table row per
// scenario. It fails when an invariant column is not 0. It kills and
// restarts processes of the local stack: never run it beside `make test`.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	list := fs.String("scenarios", strings.Join(chaosScenarios, ","), "comma-separated scenarios: "+strings.Join(chaosScenarios, ", "))
	stock := fs.Int("stock", 1000, "units on sale per scenario")
	buyers := fs.Int("buyers", 3000, "buyers per scenario (each retries its one request_id until a definite answer)")
	clients := fs.Int("clients", 32, "concurrent buyers")
	down := fs.Duration("down", 5*time.Second, "how long the component stays killed or paused")
	settle := fs.Duration("settle", 90*time.Second, "how long to wait for every acknowledged reservation to resolve")
	private := fs.Bool("private-redis", false, "give each scenario its own redis-server process instead of the stack's (Redis faults then never touch the stack)")
	crashTarget := fs.Int64("crashes", 220, "crash-consumers: consumer process crashes before the crash phase ends")
	stackScript := fs.String("stack", "deploy/local/stack.sh", "the local stack script (restarts a killed component)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	scenarios := strings.Split(*list, ",")
	for _, s := range scenarios {
		if !validScenario(s) {
			return fmt.Errorf("unknown scenario %q: %w", s, flag.ErrHelp)
		}
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	for _, s := range scenarios {
		if !faultsOwnProcess(s, cfg) {
			return fmt.Errorf("scenario %s faults a process the local stack does not run for SECKILL_BROKER=%s: %w", s, cfg.Broker.Name, flag.ErrHelp)
		}
	}
	exe, err := benchenv.ServiceBinary()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seckill-bench chaos: %s, %d units, %d buyers, %d clients, two service instances, outage %s\n\n",
		benchenv.BrokerText(cfg), *stock, *buyers, *clients, *down)
	fmt.Fprintf(stdout, "%-19s %12s %8s %9s %9s %5s %10s %10s %6s %9s %8s\n", "scenario", "acknowledged", "created", "released",
		"oversell", "lost", "dup-users", "dup-effect", "drift", "recovery", "crashes")
	var failed []string
	for _, name := range scenarios {
		run := chaosRun{cfg: cfg, log: log, exe: exe, scenario: name, stock: *stock,
			buyers: *buyers, clients: *clients, down: *down, settle: *settle, stackScript: *stackScript,
			crashTarget: *crashTarget}
		if *private {
			if run.redis, err = benchenv.StartPrivateRedis(ctx); err != nil {
				return fmt.Errorf("scenario %s: %w", name, err)
			}
		}
		r, err := runChaosScenario(ctx, run)
		if run.redis != nil {
			run.redis.Stop()
		}
		if err != nil {
			return fmt.Errorf("scenario %s: %w", name, err)
		}
		fmt.Fprintln(stdout, r.row())
		if r.violations() > 0 {
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("invariants violated in %s", strings.Join(failed, ", "))
	}
	return nil
}

// brokerTargets are the targets of kill-X and pause-X that name a
// process of a broker's local stack rather than the service or a store.
var brokerTargets = map[string]bool{"proxy": true, "namesrv": true}

// faultsOwnProcess reports whether the scenario's target, when it names
// a broker's process (kill-proxy, pause-namesrv), is a process the local
// stack runs for the chosen broker (devstack.BrokerProcesses: RocketMQ's
// proxy and name server, none of another broker).
func faultsOwnProcess(scenario string, cfg config.Config) bool {
	_, target, _ := strings.Cut(scenario, "-")
	if !brokerTargets[target] {
		return true
	}
	_, ok := brokerProcess(cfg, target)
	return ok
}

// brokerProcess is the chosen broker's stack process named component.
func brokerProcess(cfg config.Config, component string) (devstack.BrokerProcess, bool) {
	for _, p := range benchenv.BrokerProcesses(cfg.Broker.Name, cfg.Broker.Settings) {
		if p.Component == component && p.PIDFile != "" {
			return p, true
		}
	}
	return devstack.BrokerProcess{}, false
}

func validScenario(s string) bool {
	for _, k := range chaosScenarios {
		if s == k {
			return true
		}
	}
	return false
}

// chaosRun is one scenario's setting.
type chaosRun struct {
	cfg                        config.Config
	log                        *slog.Logger
	exe, scenario, stackScript string
	stock, buyers, clients     int
	down, settle               time.Duration
	// acked counts the acknowledged buyers of the running sale.
	acked *atomic.Int64
	// redis, when set, is the scenario's own Redis (--private-redis).
	redis *benchenv.PrivateRedis
	// crashTarget ends crash-consumers' crash phase: once this many
	// consumer processes crashed, every instance runs without failpoints.
	crashTarget int64
	// pair is the failover scenarios' PostgreSQL primary and standby.
	pair *pgpair.Pair
	// cluster is the Redis Cluster (with replicas) of the *-rediscluster
	// scenarios.
	cluster *rediscluster.Cluster
	// activityID is the sale's activity, set before the fault.
	activityID int64
}

// chaosResult is one scenario's row.
type chaosResult struct {
	scenario                                        string
	acknowledged, created, released                 int
	oversell, lost, dupUsers, dupEffects, unsettled int
	// drift is the I6 drift of the stock books after the sale (initial
	// stock minus Redis' available, the reservations in flight, the live
	// orders and the releases in flight): a unit given back twice or lost.
	drift    int64
	recovery time.Duration
	crashes  int
}

func (r chaosResult) violations() int {
	n := r.oversell + r.lost + r.dupUsers + r.dupEffects + r.unsettled
	if r.drift != 0 {
		n++
	}
	return n
}

func (r chaosResult) row() string {
	rec := fmt.Sprintf("%.1fs", r.recovery.Seconds())
	if r.unsettled > 0 {
		rec = fmt.Sprintf("%d open", r.unsettled)
	}
	return fmt.Sprintf("%-19s %12d %8d %9d %9d %5d %10d %10d %6d %9s %8d", r.scenario, r.acknowledged, r.created, r.released,
		r.oversell, r.lost, r.dupUsers, r.dupEffects, r.drift, rec, r.crashes)
}

// chaosReconcileInterval is how often a chaos run's instances reconcile:
// a repair (a release task a killed instance took with it, an order whose
// timeout was lost) shows within a run's settle time instead of a
// production interval later.
const chaosReconcileInterval = 15 * time.Second

// chaosInstances prepares (does not start) the two `seckill serve`
// instances of a chaos run on the scratch namespace env, PostgreSQL at
// pgDSN and Redis at redisAddr (database redisDB): no per-client rate
// limit, the reconciler every chaosReconcileInterval, warnings only in
// their logs under logDir (the caller closes
// each instance's logFile).
func chaosInstances(exe, logDir string, env *benchenv.Namespace, pgDSN, redisAddr string, redisDB int) ([]*benchenv.Instance, error) {
	var instances []*benchenv.Instance
	for i := range 2 {
		in, err := benchenv.NewInstance(fmt.Sprintf("service-%d", i), exe, logDir,
			"SECKILL_PG_DSN="+pgDSN, "SECKILL_REDIS_ADDR="+redisAddr, "SECKILL_REDIS_DB="+strconv.Itoa(redisDB),
			"SECKILL_INSTANCE_ID="+fmt.Sprintf("chaos-%d-%s", i, env.Prefix()),
			"SECKILL_RATE_BURST=1000", "SECKILL_RATE_PER_SECOND=1000", "SECKILL_LOG_LEVEL=warn",
			"SECKILL_RECONCILE_INTERVAL="+chaosReconcileInterval.String())
		if err != nil {
			for _, made := range instances {
				_ = made.LogFile.Close()
			}
			return nil, err
		}
		in.Env = append(in.Env, env.ServiceEnv()...)
		in.CleanEnv = in.Env
		instances = append(instances, in)
	}
	return instances, nil
}

// runChaosScenario runs one scenario: the world it needs (chaosWorld),
// two service instances on it, the sale with the fault mid-way
// (sellUnderFault) and the books at rest (settleChaos).
func runChaosScenario(ctx context.Context, r chaosRun) (chaosResult, error) {
	res := chaosResult{scenario: r.scenario}
	action, _, _ := strings.Cut(r.scenario, "-")
	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	w, err := newChaosWorld(ctx, &r, func(f func()) { cleanups = append(cleanups, f) })
	if err != nil {
		return res, err
	}
	instances, err := startChaosInstances(ctx, r, w, action, func(f func()) { cleanups = append(cleanups, f) })
	if err != nil {
		return res, err
	}
	sale := &chaosSale{r: r, instances: instances, secret: []byte(r.cfg.AuthSecret), httpc: &http.Client{Timeout: 10 * time.Second},
		activityID: salekit.BenchActivityID()}
	if err := salekit.CreateSaleActivity(ctx, sale.httpc, "http://"+instances[1].API, sale.secret, sale.activityID, int64(r.stock), time.Hour, 1); err != nil {
		return res, err
	}
	backAt, err := sale.sellUnderFault(ctx, action, w.fp, func(f func()) { cleanups = append(cleanups, f) })
	if err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, w.dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	err = sale.settle(ctx, pool, w.rc, backAt, &res)
	return res, err
}

// chaosWorld is what a scenario's services run on.
type chaosWorld struct {
	// dsn is the scratch database (through the failover pair's two hosts
	// in a failover scenario); serviceDSN the services' (through the
	// fault proxy when the fault is on PostgreSQL's connections).
	dsn, serviceDSN string
	// rc reads the Redis the services use (nil on a Redis Cluster).
	rc        *goredis.Client
	redisAddr string
	redisDB   int
	env       *benchenv.Namespace
	fp        *faultproxy.Proxy // nil without a connection fault
}

// newChaosWorld builds the scenario's world: a scratch namespace (on a
// synchronous PostgreSQL pair for a failover, its standby paused for
// lagfailover), the private Redis or a Redis Cluster with replicas when
// the scenario asks, and a fault proxy in front of PostgreSQL or Redis for
// a connection fault. It hands each cleanup to defer, and sets r.pair and
// r.cluster.
func newChaosWorld(ctx context.Context, r *chaosRun, deferred func(func())) (*chaosWorld, error) {
	action, target, _ := strings.Cut(r.scenario, "-")
	cfg := r.cfg
	if failovers[action] {
		pair, err := pgpair.Start(ctx, pgpair.Options{Synchronous: true})
		if err != nil {
			return nil, err
		}
		deferred(pair.Close)
		r.pair = pair
		cfg.Postgres.DSN = config.Secret(pair.Primary.URL("postgres")) // the scratch database is made on the primary
	}
	sc, err := benchenv.NewScratch(ctx, cfg, r.log, 8)
	if err != nil {
		return nil, err
	}
	deferred(sc.Close)
	w := &chaosWorld{dsn: sc.DSN, rc: sc.Redis, env: sc.Env, redisAddr: r.cfg.Redis.Addr}
	if r.pair != nil {
		if err := w.followPair(ctx, r.pair, action); err != nil {
			return nil, err
		}
	}
	if r.redis != nil {
		private := goredis.NewClient(&goredis.Options{Addr: r.redis.Addr()})
		deferred(func() { _ = private.Close() })
		w.rc, w.redisAddr = private, r.redis.Addr()
	}
	w.redisDB = w.rc.Options().DB
	if target == "rediscluster" {
		cluster, err := rediscluster.Start(ctx, rediscluster.Options{Replicas: true})
		if err != nil {
			return nil, err
		}
		deferred(cluster.Close)
		r.cluster = cluster
		w.redisAddr, w.redisDB, w.rc = strings.Join(cluster.Seeds(), ","), 0, nil
	}
	w.serviceDSN = w.dsn
	if connectionFaults[action] {
		if err := w.throughFaultProxy(target, deferred); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// followPair points the world's DSN at both hosts of the failover pair, so
// that services and checks follow the promotion; for lagfailover it pauses
// the standby's replay: it then lags by everything before the fault.
func (w *chaosWorld) followPair(ctx context.Context, pair *pgpair.Pair, action string) error {
	u, err := url.Parse(w.dsn)
	if err != nil {
		return err
	}
	w.dsn = pair.URL(strings.TrimPrefix(u.Path, "/"))
	if action == "lagfailover" {
		var paused string
		if err := pair.Standby.QueryRow(ctx, `SELECT pg_wal_replay_pause()::text`, &paused); err != nil {
			return fmt.Errorf("pause the standby's replay: %w", err)
		}
	}
	return nil
}

// throughFaultProxy puts a fault proxy between the services and the
// target of a connection fault (PostgreSQL or Redis).
func (w *chaosWorld) throughFaultProxy(target string, deferred func(func())) error {
	via := w.redisAddr
	var u *url.URL
	if target == "postgres" {
		var err error
		if u, err = url.Parse(w.dsn); err != nil {
			return err
		}
		via = u.Host
	}
	fp, err := faultproxy.New(via)
	if err != nil {
		return err
	}
	deferred(func() { _ = fp.Close() })
	fp.SetMaxConns(1024)
	w.fp = fp
	if u != nil {
		u.Host = fp.Addr()
		w.serviceDSN = u.String()
	} else {
		w.redisAddr = fp.Addr()
	}
	return nil
}

// startChaosInstances starts the two service instances on the world
// (each consumer crash-prone in the crash scenario) and waits until they
// are live; it hands their stop and log close to defer.
func startChaosInstances(ctx context.Context, r chaosRun, w *chaosWorld, action string, deferred func(func())) ([]*benchenv.Instance, error) {
	logDir, err := os.MkdirTemp("", "seckill-chaos-")
	if err != nil {
		return nil, err
	}
	instances, err := chaosInstances(r.exe, logDir, w.env, w.serviceDSN, w.redisAddr, w.redisDB)
	if err != nil {
		return nil, err
	}
	for _, in := range instances {
		deferred(func() { _ = in.LogFile.Close() })
		if action == "crash" {
			// One message per transaction and one transaction at a time
			// (a pool budget of 0.04 of 32 connections: concurrency 1):
			// each crash hits the message being processed, not twenty
			// others held beside it, so crashes exhaust no retry budget.
			in.CleanEnv = append(in.Env, "SECKILL_CONSUMER_BATCH=1", "SECKILL_PG_CONSUMER_BUDGET=0.04")
			in.Env = append(slices.Clip(in.CleanEnv), "SECKILL_FAILPOINTS="+consumerCrashes)
		}
		if err := in.Start(); err != nil {
			return nil, err
		}
		deferred(in.Stop)
	}
	for _, in := range instances {
		if err := in.WaitLive(ctx); err != nil {
			return nil, err
		}
	}
	return instances, nil
}

// chaosSale is one scenario's sale.
type chaosSale struct {
	r          chaosRun
	instances  []*benchenv.Instance
	secret     []byte
	httpc      *http.Client
	activityID int64
	answers    []salekit.BuyerAnswer
	crashes    atomic.Int64
}

// sellUnderFault runs the sale (buyers retry their one request_id, on
// either instance, until a definite answer or the deadline) and injects
// the fault once a third of the stock was acknowledged: mid-sale. It
// returns when every faulted process was back. In the crash scenario the
// instances' crashes are supervised until deferred's cleanups run.
func (s *chaosSale) sellUnderFault(ctx context.Context, action string, fp *faultproxy.Proxy, deferred func(func())) (time.Time, error) {
	r := s.r
	bases := make([]string, len(s.instances))
	for i, in := range s.instances {
		bases[i] = "http://" + in.API
	}
	s.answers = make([]salekit.BuyerAnswer, r.buyers)
	var next, acknowledged atomic.Int64
	saleCtx, stopSale := context.WithTimeout(ctx, r.down+r.settle)
	defer stopSale()
	var wg sync.WaitGroup
	for range r.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= r.buyers {
					return
				}
				s.answers[i] = salekit.BuyUntilDefinite(saleCtx, s.httpc, bases, s.secret, s.activityID, int64(1_000_000+i), fmt.Sprintf("chaos-%d", i), nil)
				if s.answers[i].OrderID != "" {
					acknowledged.Add(1)
				}
			}
		})
	}
	if action == "crash" {
		superviseCtx, stopSupervising := context.WithCancel(ctx)
		deferred(stopSupervising)
		for _, in := range s.instances {
			go in.SuperviseCrashes(superviseCtx, &s.crashes, r.crashTarget, 5000)
		}
	}
	for acknowledged.Load() < int64(r.stock/3) && saleCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	r.acked, r.activityID = &acknowledged, s.activityID
	backAt, err := injectFault(ctx, r, s.instances, fp, &s.crashes)
	if err != nil {
		stopSale()
	}
	wg.Wait()
	return backAt, err
}

// settle waits until every acknowledged reservation is an order or
// released, then fills res with the books: lost and unsettled
// reservations (with the dead letters and open reservations reported),
// oversell, duplicate users and effects, the I6 drift, the recovery (the
// last order after backAt) and the crashes.
func (s *chaosSale) settle(ctx context.Context, pool *pgxpool.Pool, rc *goredis.Client, backAt time.Time, res *chaosResult) error {
	r := s.r
	ids := salekit.AcknowledgedIDs(s.answers)
	res.acknowledged = len(ids)
	deadline := time.Now().Add(r.settle)
	for {
		var err error
		res.created, res.released, res.lost, err = benchenv.ResolveIDs(ctx, pool, ids)
		if err != nil {
			return err
		}
		if res.lost == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if res.lost > 0 {
		res.unsettled = res.lost
		reportDeadLetters(ctx, pool, os.Stderr)
		if rc != nil {
			reportOpen(ctx, pool, rc, r.cfg.Redis.Namespace, s.answers, os.Stderr)
		}
	}
	// Oversell: more live orders than units (PostgreSQL's books), or
	// buyers told "accepted" whose order then found no stock (the entry's
	// books: Redis acknowledged more than it had).
	books, err := benchenv.ReadSaleBooks(ctx, pool, s.activityID, ids)
	res.oversell = int(max(0, books.Live-int64(r.stock)) + books.NoStock)
	res.dupUsers, res.dupEffects = int(books.DupUsers), int(books.DupEffects)
	if err == nil {
		res.drift, err = chaosDrift(ctx, s.httpc, s.instances, s.secret, s.activityID)
	}
	var last time.Time
	if err == nil {
		err = pool.QueryRow(ctx, `SELECT coalesce(max(created_at), now()) FROM orders WHERE activity_id = $1`, s.activityID).Scan(&last)
	}
	if err != nil {
		return err
	}
	res.recovery = max(0, last.Sub(backAt))
	res.crashes = int(s.crashes.Load())
	return nil
}

// chaosDrift is the I6 drift of the scenario's activity as the service's
// own stock report (AdminService.GetStockReport) computes it, asked of the
// first instance that answers.
func chaosDrift(ctx context.Context, httpc *http.Client, instances []*benchenv.Instance, secret []byte, activityID int64) (int64, error) {
	var errs []error
	for _, in := range instances {
		rep, err := salekit.StockReport(ctx, httpc, "http://"+in.API, secret, activityID)
		if err == nil {
			return rep.GetDrift(), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", in.Name, err))
	}
	return 0, fmt.Errorf("stock report: %w", errors.Join(errs...))
}

// reportDeadLetters prints the scenario's dead letters by consumer group
// and error class: where unsettled reservations went when they did not
// become orders.
func reportDeadLetters(ctx context.Context, pool *pgxpool.Pool, w io.Writer) {
	rows, err := pool.Query(ctx, `SELECT consumer_group, error_class, count(*) FROM dead_letters GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		fmt.Fprintf(w, "  dead letters: %v\n", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var group, class string
		var n int
		if err := rows.Scan(&group, &class, &n); err == nil {
			fmt.Fprintf(w, "  dead letters: group %s class %s: %d\n", group, class, n)
		}
	}
}

// reportOpen prints, for up to five acknowledged orders that are neither
// created nor released, their reservation in Redis and their messages in
// the consumers' inbox: where they stopped.
func reportOpen(ctx context.Context, pool *pgxpool.Pool, rc *goredis.Client, ns string, answers []salekit.BuyerAnswer, w io.Writer) {
	store, err := redisadapter.New(rc, redisadapter.Config{Namespace: ns}, nil, nil)
	if err != nil {
		return
	}
	shown := 0
	for i, a := range answers {
		if a.OrderID == "" || shown == 5 {
			continue
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE order_id = $1`, a.OrderID).Scan(&n); err != nil || n > 0 {
			continue
		}
		shown++
		user := int64(1_000_000 + i)
		ref, err := store.LookupOrder(ctx, user, a.OrderID)
		if err != nil {
			fmt.Fprintf(w, "  open %s (user %d): no Redis lookup: %v\n", a.OrderID, user, err)
			continue
		}
		rsv, err := store.Get(ctx, ref)
		fmt.Fprintf(w, "  open %s: reservation %s status %s send_attempt %d (err %v)\n", a.OrderID,
			ref.ReservationID, rsv.Status, rsv.SendAttempt, err)
		rows, err := pool.Query(ctx, `SELECT consumer_group, status, delivery_attempt, coalesce(detail, '') FROM consumer_inbox
			WHERE order_id = $1 OR reservation_id = $2`, a.OrderID, ref.ReservationID)
		if err != nil {
			continue
		}
		for rows.Next() {
			var group, status, detail string
			var attempt int
			if rows.Scan(&group, &status, &attempt, &detail) == nil {
				fmt.Fprintf(w, "    inbox %s %s attempt %d %s\n", group, status, attempt, detail)
			}
		}
		rows.Close()
	}
}

// endCrashPhase waits until crashTarget consumer processes crashed (or the
// sale's time ran out), then replaces every instance still running with
// failpoints by a clean one (SIGKILL, restarted by its supervisor) and
// returns when all instances run clean and live: the moment the last
// crash is over, from which recovery counts.
func endCrashPhase(ctx context.Context, r chaosRun, instances []*benchenv.Instance, crashes *atomic.Int64) (time.Time, error) {
	deadline := time.Now().Add(r.down + r.settle)
	for crashes.Load() < r.crashTarget && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	for _, in := range instances {
		if in.DropFailpoints() {
			_ = in.Signal(syscall.SIGKILL)
		}
	}
	for _, in := range instances {
		for !in.RunsClean() && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		if err := in.WaitLive(ctx); err != nil {
			return time.Time{}, err
		}
	}
	return time.Now(), nil
}

// injectFault applies the scenario's fault and returns when the
// component was back.
func injectFault(ctx context.Context, r chaosRun, instances []*benchenv.Instance, fp *faultproxy.Proxy, crashes *atomic.Int64) (time.Time, error) {
	action, target, _ := strings.Cut(r.scenario, "-")
	if action == "crash" {
		return endCrashPhase(ctx, r, instances, crashes)
	}
	if connectionFaults[action] {
		return faultConnections(r, fp, action), nil
	}
	if target == "service" {
		return faultService(ctx, r, instances[0], action)
	}
	if target == "redis" && r.redis != nil {
		return faultPrivateRedis(ctx, r, action)
	}
	if failovers[action] {
		return failoverPostgres(ctx, r)
	}
	if target == "rediscluster" {
		return failoverRedis(ctx, r, action == "switchover")
	}
	return faultStackProcess(ctx, r, action, target)
}

// faultConnections applies a connection fault (delay, blackhole or
// reset) through the fault proxy for the outage and returns when the
// connections pass again.
func faultConnections(r chaosRun, fp *faultproxy.Proxy, action string) time.Time {
	switch action {
	case "delay":
		fp.SetDelay(200 * time.Millisecond)
	case "blackhole":
		fp.SetBlackhole()
	case "reset":
		fp.SetReset()
	}
	time.Sleep(r.down)
	fp.SetPass()
	return time.Now()
}

// faultService pauses (SIGSTOP, the outage, SIGCONT) or kills and
// restarts the victim instance, and returns when it is live again.
func faultService(ctx context.Context, r chaosRun, victim *benchenv.Instance, action string) (time.Time, error) {
	if action == "pause" {
		if err := victim.Signal(syscall.SIGSTOP); err != nil {
			return time.Time{}, err
		}
		time.Sleep(r.down)
		return time.Now(), victim.Signal(syscall.SIGCONT)
	}
	victim.KillAndWait()
	time.Sleep(r.down)
	if err := victim.Start(); err != nil {
		return time.Time{}, err
	}
	if err := victim.WaitLive(ctx); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// faultStackProcess pauses, kills or restores (Redis from an older copy
// of its data) the local stack's component target ("broker": the chosen
// broker's main process) and returns when `stack.sh up` brought it back.
func faultStackProcess(ctx context.Context, r chaosRun, action, target string) (time.Time, error) {
	pid, err := faultedPID(r, &target)
	if err != nil {
		return time.Time{}, err
	}
	var snapshot string
	if action == "restore" {
		// An older copy of Redis' data: what a restore from a backup or a
		// failover to a lagging replica brings back.
		aof, err := redisAOFDir()
		if err != nil {
			return time.Time{}, err
		}
		if snapshot, err = copyDir(aof); err != nil {
			return time.Time{}, err
		}
		defer func() { _ = os.RemoveAll(snapshot) }()
		r.sellOnAfterSnapshot()
	}
	if action == "pause" {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return time.Time{}, fmt.Errorf("SIGSTOP %s (pid %d): %w", target, pid, err)
		}
		time.Sleep(r.down)
		return time.Now(), syscall.Kill(pid, syscall.SIGCONT)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("SIGKILL %s (pid %d): %w", target, pid, err)
	}
	if snapshot != "" {
		if err := salekit.WaitGone(ctx, pid); err != nil {
			return time.Time{}, err
		}
		aof, _ := redisAOFDir()
		if err := replaceDir(aof, snapshot); err != nil {
			return time.Time{}, err
		}
	} else {
		time.Sleep(r.down)
	}
	up := exec.CommandContext(ctx, r.stackScript, "up")
	if out, err := up.CombinedOutput(); err != nil {
		return time.Time{}, fmt.Errorf("%s up after killing %s: %w\n%s", r.stackScript, target, err, out)
	}
	return time.Now(), nil
}

// faultedPID is the pid of the stack process *target names: a broker's
// process by the pid file the stack gives it, a store by its component's;
// "broker" becomes the name of the chosen broker's process it faults (the
// first node of its cluster mode when the stack runs that).
func faultedPID(r chaosRun, target *string) (int, error) {
	if brokerTargets[*target] {
		p, ok := brokerProcess(r.cfg, *target)
		if !ok {
			return 0, fmt.Errorf("%s is not a process of the local stack for broker %s", *target, r.cfg.Broker.Name)
		}
		return benchenv.PIDFromFile(p.PIDFile)
	}
	if *target != "broker" {
		return benchenv.StackPID(*target)
	}
	name, file, err := benchenv.BrokerStackProcess(r.cfg.Broker.Name, r.cfg.Broker.Settings)
	if err != nil {
		return 0, err
	}
	*target = name
	pid, err := benchenv.PIDFromFile(file)
	if err != nil {
		return 0, fmt.Errorf("pid of %s: %w", name, err)
	}
	return pid, nil
}

// failoverPostgres kills the pair's primary (by PID) and promotes its
// standby (for lagfailover, one whose replay was paused since before the
// sale). It returns when the standby accepts writes.
func failoverPostgres(ctx context.Context, r chaosRun) (time.Time, error) {
	r.pair.Primary.Kill()
	if err := r.pair.Promote(ctx); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// failoverRedis replaces the master serving the sale's activity SKU by
// its replica: killed by PID (the cluster promotes the replica after the
// node timeout) or, with switchover, by CLUSTER FAILOVER on the replica.
// It returns when the replica reports role:master.
func failoverRedis(ctx context.Context, r chaosRun, switchover bool) (time.Time, error) {
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: r.cluster.Seeds()})
	defer func() { _ = cc.Close() }()
	m, err := cc.MasterForKey(ctx, "{a"+strconv.FormatInt(r.activityID, 10)+":s1}")
	if err != nil {
		return time.Time{}, fmt.Errorf("the master of the sale's SKU: %w", err)
	}
	master := r.cluster.Node(m.Options().Addr)
	replica := r.cluster.Replica(master)
	if master == nil || replica == nil {
		return time.Time{}, fmt.Errorf("the master of the sale's SKU (%s) is not a master the scenario started with a replica", m.Options().Addr)
	}
	if switchover {
		if err := replica.Client().Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			return time.Time{}, fmt.Errorf("CLUSTER FAILOVER on %s: %w", replica.Addr(), err)
		}
	} else {
		r.cluster.Kill(master)
	}
	if err := r.cluster.WaitPromoted(ctx, replica); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// redisAOFDir is the local stack's Redis append-only directory.
func redisAOFDir() (string, error) {
	dir, err := benchenv.StackDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "redis", "appendonlydir"), nil
}

// copyDir copies src to a new temporary directory (for Redis' AOF
// directory: what a crash at this instant would leave) and returns it.
func copyDir(src string) (string, error) {
	dst, err := os.MkdirTemp("", "seckill-chaos-aof-")
	if err != nil {
		return "", err
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		_ = os.RemoveAll(dst)
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	return dst, nil
}

// replaceDir replaces dir's content by a copy of snapshot's.
func replaceDir(dir, snapshot string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.CopyFS(dir, os.DirFS(snapshot)); err != nil {
		return fmt.Errorf("restore %s: %w", dir, err)
	}
	return nil
}

// sellOnAfterSnapshot lets the sale go on after a Redis snapshot was
// taken (a third of the stock acknowledged) until two thirds are
// acknowledged or down passed, whichever comes first: the restored Redis
// then misses reservations of a sale still selling.
func (r chaosRun) sellOnAfterSnapshot() {
	deadline := time.Now().Add(r.down)
	for r.acked.Load() < int64(2*r.stock/3) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// faultPrivateRedis applies action to the scenario's own Redis: kill
// (SIGKILL, down, restart on the same data), pause (SIGSTOP, down,
// SIGCONT) or restore (copy the data, down, SIGKILL, restart on the copy).
func faultPrivateRedis(ctx context.Context, r chaosRun, action string) (time.Time, error) {
	p := r.redis
	switch action {
	case "pause":
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return time.Time{}, err
		}
		time.Sleep(r.down)
		return time.Now(), p.Signal(syscall.SIGCONT)
	case "restore":
		snapshot, err := copyDir(p.AOFDir())
		if err != nil {
			return time.Time{}, err
		}
		defer func() { _ = os.RemoveAll(snapshot) }()
		r.sellOnAfterSnapshot()
		p.Kill()
		if err := replaceDir(p.AOFDir(), snapshot); err != nil {
			return time.Time{}, err
		}
	default:
		p.Kill()
		time.Sleep(r.down)
	}
	if err := p.Start(ctx); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}
