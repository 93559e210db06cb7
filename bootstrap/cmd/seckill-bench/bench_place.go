package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/adapters/testkit/redisdb"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// placeResult is one measured level.
type placeResult struct {
	name    string
	clients int
	ok      int
	errs    int
	elapsed time.Duration
	lat     latencies
}

func (r placeResult) rate() float64 { return float64(r.ok) / r.elapsed.Seconds() }

func (r placeResult) row() string {
	return fmt.Sprintf("%-34s %8d %10.0f %10s %10s %8d", r.name, r.clients, r.rate(), ms(r.lat.percentile(0.50)), ms(r.lat.percentile(0.99)), r.errs)
}

// benchPlace measures PlaceOrder through the Connect API at several client
// counts, beside three ceilings measured in the same run: the reserve
// script alone (EVALSHA), a bare synchronous send loop, and a naive
// PostgreSQL row-lock purchase.
func benchPlace(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("place", flag.ContinueOnError)
	levels := fs.String("clients", "16,64,256", "concurrent clients per level")
	duration := fs.Duration("duration", 5*time.Second, "measuring time per level")
	ceilingClients := fs.Int("ceiling-clients", 64, "clients of the ceiling and baseline loops")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the PlaceOrder levels to this file")
	beside := fs.String("beside", "", "base URL of a running service (e.g. http://127.0.0.1:7080): measure its PlaceOrder latency before and during the benchmark's first level")
	besideActivity := fs.Int64("beside-activity", 1, "activity (SKU 1) of the running service that --beside buys from")
	besideClients := fs.Int("beside-clients", 8, "clients buying from the running service")
	if err := fs.Parse(args); err != nil {
		return err
	}
	clientLevels, err := intList(*levels)
	if err != nil {
		return err
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	// A scratch stack: the activities created here must not stay behind in
	// the service's database (the reconciler would find them without their
	// Redis inventory), and the benchmark never scans or slows the
	// service's keyspace.
	sc, err := newScratch(ctx, cfg, log, 300)
	if err != nil {
		return err
	}
	defer sc.Close()
	cfg, rc := sc.cfg, sc.redis
	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	// The hot path alone: order creation is measured by `seckill-bench consume`.
	keepWorkers(app, "backlog-gate", "sent-marker")
	base, stop, err := startInProcess(ctx, app, "place")
	if err != nil {
		return err
	}
	defer stop()

	fmt.Fprintf(stdout, "seckill-bench place: %s, %d cores (GOMAXPROCS %d), %s per level, send timeout %s\n\n",
		brokerText(cfg), runtime.NumCPU(), runtime.GOMAXPROCS(0), *duration, cfg.Broker.Neutral.SendTimeout)
	fmt.Fprintf(stdout, "%-34s %8s %10s %10s %10s %8s\n", "measurement", "clients", "per sec", "p50", "p99", "errors")

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	// The running service's buyers: users far from the benchmark's own.
	liveUsers := benchActivityID()%1_000_000*1_000_000 + 1_000_000_000_000
	if *beside != "" {
		r, err := placeLevel(ctx, *beside, []byte(cfg.AuthSecret), *besideActivity, liveUsers, *besideClients, *duration)
		if err != nil {
			return fmt.Errorf("the running service at %s: %w", *beside, err)
		}
		r.name = "running service, bench idle"
		fmt.Fprintln(stdout, r.row())
	}
	var results []placeResult
	for i, c := range clientLevels {
		act := ports.Activity{ActivityID: benchActivityID(), SKUID: 1, Stock: 10_000_000,
			StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
			PaymentTimeout: 15 * time.Minute, ReservationTTL: time.Hour}
		if _, err := app.Admin.CreateActivity(ctx, "system:bench", act); err != nil {
			return err
		}
		var live chan placeResult
		if *beside != "" && i == 0 {
			live = make(chan placeResult, 1)
			go func() {
				r, err := placeLevel(ctx, *beside, []byte(cfg.AuthSecret), *besideActivity, liveUsers+1_000_000/2, *besideClients, *duration)
				if err != nil {
					log.Warn("the running service during the benchmark", "error", err)
				}
				r.name = "running service, bench running"
				live <- r
			}()
		}
		r, err := placeLevel(ctx, base, []byte(cfg.AuthSecret), act.ActivityID, act.ActivityID%1_000_000_000*10, c, *duration)
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Fprintln(stdout, r.row())
		if live != nil {
			fmt.Fprintln(stdout, (<-live).row())
		}
	}

	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	store, err := redis.New(rc, redis.Config{Namespace: cfg.Redis.Namespace}, nil, log)
	if err != nil {
		return err
	}
	n := int(float64(*duration/time.Second) * 15000)
	var cpu *cpuMeter
	rp, cpuErr := stackMeteredProc("redis", false)
	if cpuErr == nil {
		cpu, cpuErr = startCPUMeter(rp, selfProc())
	}
	rr, err := reserveCeiling(ctx, store, reserveOptions{ActivityID: benchActivityID(), SKUID: 1, Reservations: n, Clients: *ceilingClients})
	if err != nil {
		return err
	}
	cpuNote := ""
	if cpuErr == nil {
		var per []float64
		if per, cpuErr = cpu.perUnit(int64(rr.Calls)); cpuErr == nil {
			cpuNote = fmt.Sprintf("CPU per reserve call: Redis %.1f µs, this process %.1f µs", per[0], per[1])
		}
	}
	if cpuErr != nil {
		log.Warn("the reserve ceiling's CPU was not read", "error", cpuErr)
	}
	redisCeiling := placeResult{name: "ceiling: reserve script (EVALSHA)", clients: *ceilingClients, ok: rr.Calls,
		elapsed: rr.Elapsed, lat: latencies{rr.P50, rr.P99}}
	fmt.Fprintf(stdout, "%-34s %8d %10.0f %10s %10s %8d\n", redisCeiling.name, *ceilingClients, rr.PerSecond, ms(rr.P50), ms(rr.P99), 0)
	if cpuNote != "" {
		fmt.Fprintf(stdout, "%-34s %s\n", "", cpuNote)
	}

	sl, err := benchkit.SendLoop(ctx, app.Broker, n/3, *ceilingClients, func(i int) ports.OutboundMessage {
		id := fmt.Sprintf("evt_bench_%d_%d", time.Now().UnixNano(), i)
		return ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: message.TagCreateOrder,
			Keys: []string{id}, Body: []byte(`{"bench":true}`)}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-34s %8d %10.0f %10s %10s %8d\n", "ceiling: bare sync send", *ceilingClients, sl.Rate(),
		ms(sl.Percentile(0.50)), ms(sl.Percentile(0.99)), sl.Unknown+sl.Rejected)

	naive, err := naiveBaseline(ctx, string(cfg.Postgres.DSN), *ceilingClients, *duration)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, naive.row())

	ceiling := min(rr.PerSecond, sl.Rate())
	fmt.Fprintln(stdout)
	for _, r := range results {
		fmt.Fprintf(stdout, "PlaceOrder at %3d clients: %5.1f%% of min(reserve, send) ceiling, %5.1fx the naive baseline, p99 %s\n",
			r.clients, 100*r.rate()/ceiling, r.rate()/naive.rate(), ms(r.lat.percentile(0.99)))
	}
	return nil
}

// closedLoop runs clients goroutines that each call op back to back for
// d (op gets a sequence number unique across clients) and collects the
// latency of every call and the first error.
func closedLoop(ctx context.Context, name string, clients int, d time.Duration, op func(seq int64) error) (placeResult, error) {
	var (
		seq      atomic.Int64
		mu       sync.Mutex
		res      = placeResult{name: name, clients: clients}
		wg       sync.WaitGroup
		firstErr error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat latencies
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

// placeLevel runs clients concurrent buyers for d against the service at
// base; every request is a new user (from firstUser+1 on) with a new
// request id.
func placeLevel(ctx context.Context, base string, secret []byte, activityID, firstUser int64, clients int, d time.Duration) (placeResult, error) {
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
			return placeResult{}, err
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
func naiveBaseline(ctx context.Context, dsn string, clients int, d time.Duration) (placeResult, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return placeResult{}, err
	}
	pcfg.MaxConns = int32(min(clients, 64))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return placeResult{}, err
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
			return placeResult{}, fmt.Errorf("naive baseline setup: %w", err)
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

// scratchRedis leases a Redis logical database of its own for a
// benchmark (never the service's, SECKILL_REDIS_DB) and returns a client
// bound to it with poolSize connections; release empties and returns it.
func scratchRedis(ctx context.Context, cfg config.Config, poolSize int) (*goredis.Client, func(), error) {
	l, err := redisdb.Claim(ctx, goredis.Options{Addr: cfg.Redis.Addr, Password: string(cfg.Redis.Password), PoolSize: poolSize}, 0)
	if err != nil {
		return nil, nil, err
	}
	return l.Client, func() { _ = l.Release(context.WithoutCancel(ctx)) }, nil
}
