package benchplace

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/reserveceiling"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// Result is one measured level: the calls its closed-loop clients made
// over the measuring time, how many failed, and the latency of each.
type Result struct {
	name    string
	clients int
	ok      int
	errs    int
	elapsed time.Duration
	lat     salekit.Latencies
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms" }

// Rate is the successful calls per second.
func (r Result) Rate() float64 { return float64(r.ok) / r.elapsed.Seconds() }

// Errors is the number of calls that failed.
func (r Result) Errors() int { return r.errs }

// row is r's line of the table.
func (r Result) row() string {
	return fmt.Sprintf("%-34s %8d %10.0f %10s %10s %8d", r.name, r.clients, r.Rate(), ms(r.lat.Percentile(0.50)), ms(r.lat.Percentile(0.99)), r.errs)
}

// placeOptions are the flags of `seckill-bench place`.
type placeOptions struct {
	clientLevels   []int
	duration       time.Duration
	ceilingClients int
	cpuProfile     string
	beside         string
	besideActivity int64
	besideClients  int
}

// placeRun is what the phases of one `seckill-bench place` run share: the
// options, the scratch stack's configuration and Redis client, the
// in-process service and its base URL, and where the table goes.
type placeRun struct {
	opts   placeOptions
	cfg    config.Config
	log    *slog.Logger
	rc     *goredis.Client
	app    *bootstrap.App
	base   string
	stdout io.Writer
}

// Run is `seckill-bench place` with the command-line flags args: it
// measures PlaceOrder through the Connect API at several client counts,
// beside three ceilings measured in the same run: the reserve script
// alone (EVALSHA), a bare synchronous send loop, and a naive PostgreSQL
// row-lock purchase. The table goes to stdout. A bad flag is an error
// wrapping flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parsePlaceFlags(args)
	if err != nil {
		return err
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	// A scratch stack: the activities created here must not stay behind in
	// the service's database (the reconciler would find them without their
	// Redis inventory), and the benchmark never scans or slows the
	// service's keyspace.
	sc, err := benchenv.NewScratch(ctx, cfg, log, 300)
	if err != nil {
		return err
	}
	defer sc.Close()
	cfg, rc := sc.Config, sc.Redis
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	// The hot path alone: order creation is measured by `seckill-bench consume`.
	benchenv.KeepWorkers(app, "backlog-gate", "sent-marker")
	base, stop, err := benchenv.StartInProcess(ctx, app, "place")
	if err != nil {
		return err
	}
	defer stop()
	r := &placeRun{opts: o, cfg: cfg, log: log, rc: rc, app: app, base: base, stdout: stdout}
	results, err := r.measureLevels(ctx)
	if err != nil {
		return err
	}
	return r.measureCeilings(ctx, results)
}

// parsePlaceFlags parses the flags of `seckill-bench place` into
// placeOptions; it returns the flag package's error (flag.ErrHelp for -h)
// or that of a malformed --clients list.
func parsePlaceFlags(args []string) (placeOptions, error) {
	fs := flag.NewFlagSet("place", flag.ContinueOnError)
	var o placeOptions
	levels := fs.String("clients", "16,64,256", "concurrent clients per level")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measuring time per level")
	fs.IntVar(&o.ceilingClients, "ceiling-clients", 64, "clients of the ceiling and baseline loops")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the PlaceOrder levels to this file")
	fs.StringVar(&o.beside, "beside", "", "base URL of a running service (e.g. http://127.0.0.1:7080): measure its PlaceOrder latency before and during the benchmark's first level")
	fs.Int64Var(&o.besideActivity, "beside-activity", 1, "activity (SKU 1) of the running service that --beside buys from")
	fs.IntVar(&o.besideClients, "beside-clients", 8, "clients buying from the running service")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.clientLevels, err = salekit.IntList(*levels); err != nil {
		return o, err
	}
	return o, nil
}

// measureLevels prints the header, then measures PlaceOrder at every
// client level (under the CPU profile when --cpuprofile is set), with the
// running service of --beside measured idle before the first level and
// during it. It returns the levels' results in order.
func (r *placeRun) measureLevels(ctx context.Context) ([]Result, error) {
	o := r.opts
	fmt.Fprintf(r.stdout, "seckill-bench place: %s, %d cores (GOMAXPROCS %d), %s per level, send timeout %s\n\n",
		benchenv.BrokerText(r.cfg), runtime.NumCPU(), runtime.GOMAXPROCS(0), o.duration, r.cfg.Broker.Neutral.SendTimeout)
	fmt.Fprintf(r.stdout, "%-34s %8s %10s %10s %10s %8s\n", "measurement", "clients", "per sec", "p50", "p99", "errors")

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
	}
	// The running service's buyers: users far from the benchmark's own.
	liveUsers := salekit.BenchActivityID()%1_000_000*1_000_000 + 1_000_000_000_000
	if o.beside != "" {
		res, err := Level(ctx, o.beside, []byte(r.cfg.AuthSecret), o.besideActivity, liveUsers, o.besideClients, o.duration)
		if err != nil {
			return nil, fmt.Errorf("the running service at %s: %w", o.beside, err)
		}
		res.name = "running service, bench idle"
		fmt.Fprintln(r.stdout, res.row())
	}
	var results []Result
	for i, c := range o.clientLevels {
		res, err := r.measureLevel(ctx, c, o.beside != "" && i == 0, liveUsers)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	return results, nil
}

// measureLevel measures PlaceOrder at clients concurrent buyers on an
// activity of its own and prints its row; withLive also measures the
// running service of --beside meanwhile (its buyers from liveUsers on)
// and prints that row after it. It returns the level's result.
func (r *placeRun) measureLevel(ctx context.Context, clients int, withLive bool, liveUsers int64) (Result, error) {
	o := r.opts
	act := ports.Activity{ActivityID: salekit.BenchActivityID(), SKUID: 1, Stock: 10_000_000,
		StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: time.Hour}
	if _, err := r.app.Admin.CreateActivity(ctx, "system:bench", act); err != nil {
		return Result{}, err
	}
	var live chan Result
	if withLive {
		live = make(chan Result, 1)
		go func() {
			res, err := Level(ctx, o.beside, []byte(r.cfg.AuthSecret), o.besideActivity, liveUsers+1_000_000/2, o.besideClients, o.duration)
			if err != nil {
				r.log.Warn("the running service during the benchmark", "error", err)
			}
			res.name = "running service, bench running"
			live <- res
		}()
	}
	res, err := Level(ctx, r.base, []byte(r.cfg.AuthSecret), act.ActivityID, act.ActivityID%1_000_000_000*10, clients, o.duration)
	if err != nil {
		return Result{}, err
	}
	fmt.Fprintln(r.stdout, res.row())
	if live != nil {
		fmt.Fprintln(r.stdout, (<-live).row())
	}
	return res, nil
}

// measureCeilings measures and prints the three ceilings (the reserve
// script, the bare synchronous send, the naive PostgreSQL purchase), then
// each level of results against them.
func (r *placeRun) measureCeilings(ctx context.Context, results []Result) error {
	o := r.opts
	store, err := redis.New(r.rc, redis.Config{Namespace: r.cfg.Redis.Namespace}, nil, r.log)
	if err != nil {
		return err
	}
	n := int(float64(o.duration/time.Second) * 15000)
	rr, err := r.measureReserveCeiling(ctx, store, n)
	if err != nil {
		return err
	}
	sl, err := benchkit.SendLoop(ctx, r.app.Broker, n/3, o.ceilingClients, func(i int) ports.OutboundMessage {
		id := fmt.Sprintf("evt_bench_%d_%d", time.Now().UnixNano(), i)
		return ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: message.TagCreateOrder,
			Keys: []string{id}, Body: []byte(`{"bench":true}`)}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(r.stdout, "%-34s %8d %10.0f %10s %10s %8d\n", "ceiling: bare sync send", o.ceilingClients, sl.Rate(),
		ms(sl.Percentile(0.50)), ms(sl.Percentile(0.99)), sl.Unknown+sl.Rejected)

	naive, err := naiveBaseline(ctx, string(r.cfg.Postgres.DSN), o.ceilingClients, o.duration)
	if err != nil {
		return err
	}
	fmt.Fprintln(r.stdout, naive.row())

	ceiling := min(rr.PerSecond, sl.Rate())
	fmt.Fprintln(r.stdout)
	for _, res := range results {
		fmt.Fprintf(r.stdout, "PlaceOrder at %3d clients: %5.1f%% of min(reserve, send) ceiling, %5.1fx the naive baseline, p99 %s\n",
			res.clients, 100*res.Rate()/ceiling, res.Rate()/naive.Rate(), ms(res.lat.Percentile(0.99)))
	}
	return nil
}

// measureReserveCeiling runs n reserve calls on store from --ceiling-clients
// clients, with Redis's and this process's CPU metered when the stack's
// Redis can be read, prints the ceiling's row and its CPU note, and
// returns the measure.
func (r *placeRun) measureReserveCeiling(ctx context.Context, store *redis.Store, n int) (reserveceiling.Result, error) {
	o := r.opts
	var cpu *benchenv.CPUMeter
	rp, cpuErr := benchenv.StackMeteredProc("redis", false)
	if cpuErr == nil {
		cpu, cpuErr = benchenv.StartCPUMeter(rp, benchenv.SelfProc())
	}
	rr, err := reserveceiling.Measure(ctx, store, reserveceiling.Options{ActivityID: salekit.BenchActivityID(), SKUID: 1, Reservations: n, Clients: o.ceilingClients})
	if err != nil {
		return rr, err
	}
	cpuNote := ""
	if cpuErr == nil {
		var per []float64
		if per, cpuErr = cpu.PerUnit(int64(rr.Calls)); cpuErr == nil {
			cpuNote = fmt.Sprintf("CPU per reserve call: Redis %.1f µs, this process %.1f µs", per[0], per[1])
		}
	}
	if cpuErr != nil {
		r.log.Warn("the reserve ceiling's CPU was not read", "error", cpuErr)
	}
	redisCeiling := Result{name: "ceiling: reserve script (EVALSHA)", clients: o.ceilingClients, ok: rr.Calls,
		elapsed: rr.Elapsed, lat: salekit.Latencies{rr.P50, rr.P99}}
	fmt.Fprintf(r.stdout, "%-34s %8d %10.0f %10s %10s %8d\n", redisCeiling.name, o.ceilingClients, rr.PerSecond, ms(rr.P50), ms(rr.P99), 0)
	if cpuNote != "" {
		fmt.Fprintf(r.stdout, "%-34s %s\n", "", cpuNote)
	}
	return rr, nil
}

// closedLoop runs clients goroutines that each call op back to back for
// d (op gets a sequence number unique across clients) and collects the
// latency of every call and the first error.
func closedLoop(ctx context.Context, name string, clients int, d time.Duration, op func(seq int64) error) (Result, error) {
	var (
		seq      atomic.Int64
		mu       sync.Mutex
		res      = Result{name: name, clients: clients}
		wg       sync.WaitGroup
		firstErr error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat salekit.Latencies
			ok, errs := 0, 0
			var first error
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				err := op(seq.Add(1))
				lat = append(lat, time.Since(t0))
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				ok++
			}
			mu.Lock()
			res.ok += ok
			res.errs += errs
			res.lat = append(res.lat, lat...)
			if firstErr == nil {
				firstErr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if res.ok == 0 && firstErr != nil {
		return res, fmt.Errorf("%s: every call failed, first: %w", name, firstErr)
	}
	return res, nil
}

// Level runs clients concurrent buyers for d against the service at
// base, each making PlaceOrder calls (gRPC over h2c) back to back on SKU 1
// of activity activityID; every request is a new user (from firstUser+1
// on, with a token minted with secret, most of them before the clock
// starts) with a new request id. It fails only when every call failed.
func Level(ctx context.Context, base string, secret []byte, activityID, firstUser int64, clients int, d time.Duration) (Result, error) {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	defer tr.CloseIdleConnections()
	client := seckillv1connect.NewOrderServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
	// Tokens are minted before the clock starts: the load generator shares
	// the machine with the service, and signing is the client's cost.
	tokens := make([]string, int(d.Seconds()*8000))
	for i := range tokens {
		tok, err := api.MintToken(secret, firstUser+int64(i)+1, false, time.Hour, time.Now())
		if err != nil {
			return Result{}, err
		}
		tokens[i] = tok
	}
	return closedLoop(ctx, "PlaceOrder (Connect API, gRPC)", clients, d, func(seq int64) error {
		user, tok := firstUser+seq, ""
		if seq <= int64(len(tokens)) {
			tok = tokens[seq-1]
		} else {
			var err error
			if tok, err = api.MintToken(secret, user, false, time.Hour, time.Now()); err != nil {
				return err
			}
		}
		req := connect.NewRequest(&seckillv1.PlaceOrderRequest{ActivityId: activityID, SkuId: 1,
			RequestId: fmt.Sprintf("bench-%d", user)})
		req.Header().Set("Authorization", "Bearer "+tok)
		_, err := client.PlaceOrder(ctx, req)
		return err
	})
}

// naiveBaseline measures what a user might build instead: each purchase
// is one PostgreSQL transaction that locks the stock row (SELECT ... FOR
// UPDATE), decrements it and inserts the order.
func naiveBaseline(ctx context.Context, dsn string, clients int, d time.Duration) (Result, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return Result{}, err
	}
	pcfg.MaxConns = int32(min(clients, 64))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return Result{}, err
	}
	defer pool.Close()
	setup := []string{
		`CREATE SCHEMA IF NOT EXISTS bench`,
		`DROP TABLE IF EXISTS bench.naive_orders, bench.naive_stock`,
		`CREATE TABLE bench.naive_stock (sku_id bigint PRIMARY KEY, available bigint NOT NULL CHECK (available >= 0))`,
		`CREATE TABLE bench.naive_orders (id bigserial PRIMARY KEY, sku_id bigint NOT NULL, user_id bigint NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now(), UNIQUE (sku_id, user_id))`,
		`INSERT INTO bench.naive_stock VALUES (1, 100000000)`,
	}
	for _, q := range setup {
		if _, err := pool.Exec(ctx, q); err != nil {
			return Result{}, fmt.Errorf("naive baseline setup: %w", err)
		}
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), `DROP SCHEMA bench CASCADE`)
	}()
	return closedLoop(ctx, "baseline: PostgreSQL row lock", clients, d, func(seq int64) error {
		return naivePurchase(ctx, pool, seq)
	})
}

func naivePurchase(ctx context.Context, pool *pgxpool.Pool, user int64) (err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	var available int64
	if err := tx.QueryRow(ctx, `SELECT available FROM bench.naive_stock WHERE sku_id = 1 FOR UPDATE`).Scan(&available); err != nil {
		return err
	}
	if available <= 0 {
		return errors.New("sold out")
	}
	if _, err := tx.Exec(ctx, `UPDATE bench.naive_stock SET available = available - 1 WHERE sku_id = 1`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO bench.naive_orders (sku_id, user_id) VALUES (1, $1)`, user); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
