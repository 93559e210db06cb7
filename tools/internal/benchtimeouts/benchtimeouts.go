package benchtimeouts

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/metrics"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// timeoutsOptions are the flags of `seckill-bench timeouts`.
type timeoutsOptions struct {
	units              int
	paymentTimeout     time.Duration
	clients            int
	sellOver           time.Duration
	ceilingBatch       int
	ceilingConcurrency int
	reconcile          time.Duration
	within             time.Duration
}

// timeoutsRun is what the phases of one `seckill-bench timeouts` run
// share: the options, the scratch stack (configuration, database, Redis
// store), the running service and its base URL, and where the report goes.
type timeoutsRun struct {
	opts   timeoutsOptions
	cfg    config.Config
	log    *slog.Logger
	dsn    string
	pool   *pgxpool.Pool
	rs     *redis.Store
	app    *bootstrap.App
	base   string
	stdout io.Writer
}

// timeoutsSale is the sale whose orders time out: its activity and the
// first and last payment deadline of its orders.
type timeoutsSale struct {
	act                         ports.Activity
	firstDeadline, lastDeadline time.Time
}

// timeoutsAtRest is what is read once the wave is over: when the last
// compensation task was relayed and the last order canceled, the cancels'
// lateness (and how many came early), and the PostgreSQL ceiling.
type timeoutsAtRest struct {
	lastRelayed, lastCanceled time.Time
	lateness                  salekit.Latencies
	early                     int
	ceiling                   ceilingResult
}

// Run is `seckill-bench timeouts` with the command-line flags args, its
// report going to stdout. It measures the timeout wave: it sells N units
// through the real service (Connect API, every worker running) with a
// short payment timeout, lets every order expire unpaid and reports how
// late the orders were canceled against their expires_at (canceled_at -
// expires_at from the orders table), how long after the last deadline
// the last unit was for sale again in Redis, and the cancel and release
// rates; beside it, in the same run and on the same database, the
// PostgreSQL ceiling of the cancel transactions (the payment-timeout
// handler called directly on expired orders, without the broker). The
// reconciler is off unless --reconcile-interval says otherwise, so the
// consumers alone are measured. A bad flag is an error wrapping
// flag.ErrHelp.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseTimeoutsFlags(args)
	if err != nil {
		return err
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	sc, err := benchenv.NewScratch(ctx, cfg, log, 0)
	if err != nil {
		return err
	}
	defer sc.Close()
	cfg, dsn, rc := sc.Config, sc.DSN, sc.Redis
	cfg.Workers.ReconcileInterval = o.reconcile
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	rs, err := redis.New(rc, redis.Config{Namespace: cfg.Redis.Namespace}, nil, log)
	if err != nil {
		return err
	}

	app, cleanup, err := bootstrap.NewApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	base, stopApp, err := runAppInBackground(ctx, app)
	if err != nil {
		return err
	}
	defer func() { _ = stopApp() }()

	r := &timeoutsRun{opts: o, cfg: cfg, log: log, dsn: dsn, pool: pool, rs: rs, app: app, base: base, stdout: stdout}
	sale, err := r.sell(ctx)
	if err != nil {
		return err
	}
	w, err := watchWave(ctx, pool, rs, sale.act, o.units, sale.lastDeadline.Add(o.within))
	if err != nil {
		return err
	}
	if err := stopApp(); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	rest, err := r.measureAtRest(ctx, sale.act)
	if err != nil {
		return err
	}
	r.report(sale, w, rest)
	return nil
}

// parseTimeoutsFlags parses the flags of `seckill-bench timeouts` into
// timeoutsOptions; a setting that must be > 0 and is not is an error
// wrapping flag.ErrHelp.
func parseTimeoutsFlags(args []string) (timeoutsOptions, error) {
	fs := flag.NewFlagSet("timeouts", flag.ContinueOnError)
	var o timeoutsOptions
	fs.IntVar(&o.units, "units", 3000, "units sold, one order each; nobody pays")
	fs.DurationVar(&o.paymentTimeout, "payment-timeout", 30*time.Second, "payment timeout of the sale")
	fs.IntVar(&o.clients, "clients", 64, "concurrent buyers while selling")
	fs.DurationVar(&o.sellOver, "sell-over", 12*time.Second, "spread the purchases evenly over this long, so the deadlines spread alike (0: as fast as possible)")
	fs.IntVar(&o.ceilingBatch, "ceiling-batch", 16, "timeout messages per handler call in the PostgreSQL ceiling (the consumer's batch)")
	fs.IntVar(&o.ceilingConcurrency, "ceiling-concurrency", 4, "concurrent handler calls in the PostgreSQL ceiling (the consumer's)")
	fs.DurationVar(&o.reconcile, "reconcile-interval", 0, "run the reconciler this often during the wave (0: off)")
	fs.DurationVar(&o.within, "within", 3*time.Minute, "give up when the wave is not over this long after the last deadline")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.units <= 0 || o.clients <= 0 || o.ceilingBatch <= 0 || o.ceilingConcurrency <= 0 || o.paymentTimeout <= 0 {
		return o, fmt.Errorf("units, clients, payment timeout and ceiling settings must be > 0: %w", flag.ErrHelp)
	}
	return o, nil
}

// runAppInBackground runs app (app.Run) in a goroutine it owns until it
// listens, and returns its base URL and stopApp, which cancels the run and
// returns its error (nil when called again). When the app ends before it
// listens, it returns that error and no stopApp.
func runAppInBackground(ctx context.Context, app *bootstrap.App) (string, func() error, error) {
	runCtx, stop := context.WithCancel(ctx)
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, func(a net.Addr) { addrc <- a }) }()
	stopped := false
	stopApp := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stop()
		return <-done
	}
	select {
	case a := <-addrc:
		return "http://" + a.String(), stopApp, nil
	case err := <-done:
		return "", nil, err
	}
}

// sell prints the header, creates the sale's activity, sells every unit
// through the API, waits for their orders and prints when they were
// created and when their deadlines fall. It returns the sale.
func (r *timeoutsRun) sell(ctx context.Context) (timeoutsSale, error) {
	o := r.opts
	fmt.Fprintf(r.stdout, "seckill-bench timeouts: %s, %d cores (GOMAXPROCS %d), %d units sold over %s by %d buyers, payment timeout %s, reconciler %s\n\n",
		benchenv.BrokerText(r.cfg), runtime.NumCPU(), runtime.GOMAXPROCS(0), o.units, o.sellOver, o.clients, o.paymentTimeout, onOff(o.reconcile))
	s := timeoutsSale{act: ports.Activity{ActivityID: salekit.BenchActivityID(), SKUID: 1, Stock: int64(o.units),
		StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		PaymentTimeout: o.paymentTimeout, ReservationTTL: 10 * time.Minute}}
	if _, err := r.app.Admin.CreateActivity(ctx, "system:bench", s.act); err != nil {
		return s, err
	}
	sold, err := sellUnits(ctx, r.base, []byte(r.cfg.AuthSecret), s.act, o.units, o.clients, o.sellOver)
	if err != nil {
		return s, err
	}
	if err := waitCount(ctx, r.pool, `SELECT count(*) FROM orders WHERE activity_id = $1`, s.act.ActivityID, o.units, o.paymentTimeout); err != nil {
		return s, fmt.Errorf("orders of the sale: %w", err)
	}
	var firstCreated, lastCreated time.Time
	if err := r.pool.QueryRow(ctx, `SELECT min(created_at), max(created_at), min(expires_at), max(expires_at)
		FROM orders WHERE activity_id = $1`, s.act.ActivityID).Scan(&firstCreated, &lastCreated, &s.firstDeadline, &s.lastDeadline); err != nil {
		return s, err
	}
	fmt.Fprintf(r.stdout, "sold %d units in %s through the API; orders created over %s; deadlines from %s to %s (%s apart)\n",
		o.units, sold.Round(time.Millisecond), lastCreated.Sub(firstCreated).Round(time.Millisecond),
		s.firstDeadline.Format("15:04:05.000"), s.lastDeadline.Format("15:04:05.000"), s.lastDeadline.Sub(s.firstDeadline).Round(time.Millisecond))
	return s, nil
}

// measureAtRest reads, once the wave is over and the service stopped,
// when the last compensation task was relayed, the lateness of act's
// cancels and when the last was made, then measures the PostgreSQL
// ceiling of the cancel transactions.
func (r *timeoutsRun) measureAtRest(ctx context.Context, act ports.Activity) (timeoutsAtRest, error) {
	var rest timeoutsAtRest
	// The outbox rows of this run's compensation tasks (the ceiling below
	// publishes none): when the relay handed the last one to the broker.
	if err := r.pool.QueryRow(ctx, `SELECT max(published_at) FROM event_outbox WHERE tag = $1`,
		message.TagReleaseReservation).Scan(&rest.lastRelayed); err != nil {
		return rest, err
	}
	var err error
	if rest.lateness, rest.early, err = cancelLateness(ctx, r.pool, act.ActivityID); err != nil {
		return rest, err
	}
	if err := r.pool.QueryRow(ctx, `SELECT max(canceled_at) FROM orders WHERE activity_id = $1`, act.ActivityID).Scan(&rest.lastCanceled); err != nil {
		return rest, err
	}
	if rest.ceiling, err = cancelCeiling(ctx, r.cfg, r.dsn, r.rs, r.log, r.opts.units, r.opts.ceilingBatch, r.opts.ceilingConcurrency); err != nil {
		return rest, fmt.Errorf("PostgreSQL ceiling: %w", err)
	}
	return rest, nil
}

// report prints the measurement table of the wave and its invariants.
func (r *timeoutsRun) report(sale timeoutsSale, w waveResult, rest timeoutsAtRest) {
	o := r.opts
	firstDeadline, lastDeadline := sale.firstDeadline, sale.lastDeadline
	wave := float64(o.units)
	fmt.Fprintf(r.stdout, "\n%-58s %12s\n", "measurement", "value")
	row := func(name, value string) { fmt.Fprintf(r.stdout, "%-58s %12s\n", name, value) }
	row("cancel lateness p50 (canceled_at - expires_at)", secs(rest.lateness.Percentile(0.50)))
	row("cancel lateness p99", secs(rest.lateness.Percentile(0.99)))
	row("cancel lateness max", secs(rest.lateness.Percentile(1)))
	row("cancels before expires_at (must be 0)", fmt.Sprint(rest.early))
	row("last cancel after the last deadline", secs(rest.lastCanceled.Sub(lastDeadline)))
	row("last compensation task relayed after the last deadline", secs(rest.lastRelayed.Sub(lastDeadline)))
	row("last unit for sale again in Redis after the last deadline", secs(w.lastBack.Sub(lastDeadline)))
	row("deadlines/s (the wave's arrival rate)", rate(wave, lastDeadline.Sub(firstDeadline)))
	row("cancels/s (first deadline to last cancel)", rate(wave, rest.lastCanceled.Sub(firstDeadline)))
	row("releases/s (first deadline to last unit back in Redis)", rate(wave, w.lastBack.Sub(firstDeadline)))
	row(fmt.Sprintf("ceiling: PostgreSQL cancels/s (batch %d, %d concurrent)", o.ceilingBatch, o.ceilingConcurrency), rate(float64(rest.ceiling.canceled), rest.ceiling.elapsed))
	fmt.Fprintf(r.stdout, "\ninvariants: %s\n", w.check)
}

func onOff(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return "every " + d.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

func rate(n float64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", n/d.Seconds())
}

// sellUnits buys units units of act through the API, one new buyer per
// unit, with clients concurrent buyers (tokens minted before the clock
// starts), purchase i not before over * i / units from the start; a failed
// call is retried with the same request id. It returns how long the sale
// took.
func sellUnits(ctx context.Context, base string, secret []byte, act ports.Activity, units, clients int, over time.Duration) (time.Duration, error) {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	defer tr.CloseIdleConnections()
	client := seckillv1connect.NewOrderServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
	firstUser := act.ActivityID % 1_000_000_000 * 10
	tokens := make([]string, units)
	for i := range tokens {
		tok, err := api.MintToken(secret, firstUser+int64(i)+1, false, time.Hour, time.Now())
		if err != nil {
			return 0, err
		}
		tokens[i] = tok
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= units || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(start.Add(over * time.Duration(i) / time.Duration(units))))
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					req := connect.NewRequest(&seckillv1.PlaceOrderRequest{ActivityId: act.ActivityID, SkuId: act.SKUID,
						RequestId: fmt.Sprintf("wave-%d", i)})
					req.Header().Set("Authorization", "Bearer "+tokens[i])
					if _, err = client.PlaceOrder(ctx, req); err == nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("place order of buyer %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// waitCount polls query (one $1 argument) until it counts want rows.
func waitCount(ctx context.Context, pool *pgxpool.Pool, query string, arg any, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		var n int
		if err := pool.QueryRow(ctx, query, arg).Scan(&n); err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d after %s", n, want, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waveResult is what watchWave saw.
type waveResult struct {
	// lastBack is when Redis showed every unit available again.
	lastBack time.Time
	check    string
}

// watchWave polls the Redis stock of act every 20 ms (and the canceled
// orders in PostgreSQL every 200 ms) until all units are back for sale and
// every order is canceled, or until giveUp.
func watchWave(ctx context.Context, pool *pgxpool.Pool, rs *redis.Store, act ports.Activity, units int, giveUp time.Time) (waveResult, error) {
	var (
		res      waveResult
		canceled int
		lastPoll time.Time
	)
	for {
		inv, err := rs.Inventory(ctx, act.ActivityID, act.SKUID)
		if err != nil {
			return res, err
		}
		now := time.Now()
		if inv.Available >= int64(units) && res.lastBack.IsZero() {
			res.lastBack = now
		}
		if canceled < units && now.Sub(lastPoll) >= 200*time.Millisecond {
			lastPoll = now
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'CANCELED'`,
				act.ActivityID).Scan(&canceled); err != nil {
				return res, err
			}
		}
		if !res.lastBack.IsZero() && canceled >= units {
			res.check = fmt.Sprintf("hold (all %d orders canceled, all %d units available in Redis, %d held)", canceled, inv.Available, len(inv.Held))
			if inv.Available != int64(units) || len(inv.Held) != 0 {
				res.check = fmt.Sprintf("VIOLATED: %d canceled, Redis available %d of %d, %d held", canceled, inv.Available, units, len(inv.Held))
			}
			return res, nil
		}
		if now.After(giveUp) {
			return res, fmt.Errorf("the wave is not over: %d of %d orders canceled, %d of %d units back in Redis", canceled, units, inv.Available, units)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cancelLateness reads canceled_at - expires_at of every timed-out order
// of the activity and counts cancels before the deadline.
func cancelLateness(ctx context.Context, pool *pgxpool.Pool, activityID int64) (salekit.Latencies, int, error) {
	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM canceled_at - expires_at)::float8 FROM orders
		WHERE activity_id = $1 AND status = 'CANCELED' AND cancel_reason = 'PAYMENT_TIMEOUT'`, activityID)
	if err != nil {
		return nil, 0, err
	}
	seconds, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return nil, 0, fmt.Errorf("read cancel lateness: %w", err)
	}
	lat := make(salekit.Latencies, len(seconds))
	early := 0
	for i, s := range seconds {
		lat[i] = time.Duration(s * float64(time.Second))
		if lat[i] < 0 {
			early++
		}
	}
	return lat, early, nil
}

// ceilingResult is the PostgreSQL ceiling of the cancel transactions.
type ceilingResult struct {
	canceled int
	elapsed  time.Duration
}

// cancelCeiling measures the PostgreSQL ceiling of the payment-timeout
// handler: n orders of a fresh activity are created directly (the
// order-create handler, batches of 32) with a 1 s payment timeout, and once
// they expired the payment-timeout handler is called directly with their
// timeout messages, batch messages per call, concurrency calls at a time:
// the same transactions as the consumer's, without the broker.
func cancelCeiling(ctx context.Context, cfg config.Config, dsn string, rs *redis.Store, log *slog.Logger, n, batch, concurrency int) (ceilingResult, error) {
	store, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: cfg.Postgres.MaxConns}, prometheus.NewRegistry(), log)
	if err != nil {
		return ceilingResult{}, err
	}
	defer store.Close()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		return ceilingResult{}, err
	}
	policy := application.CompensationPolicy{MaxAttempts: 5, Window: time.Hour}
	acts := application.NewActivities(store)
	act := ports.Activity{ActivityID: salekit.BenchActivityID(), SKUID: 1, Stock: int64(n),
		StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		PaymentTimeout: time.Second, ReservationTTL: time.Hour}
	if _, err := application.NewAdmin(store, rs, acts, nil, nil, log).CreateActivity(ctx, "system:bench", act); err != nil {
		return ceilingResult{}, err
	}
	create := application.NewCreateOrders(store, rs, acts, nil, log, "BENCH_CEILING_CREATE", policy)
	now := time.Now().UTC()
	var creates, timeouts []ports.Delivery
	for i := range n {
		id := fmt.Sprintf("%d_%d", act.ActivityID, i)
		c := message.OrderCreateRequested{
			Envelope: message.Envelope{SchemaVersion: message.SchemaV1, EventType: message.TypeOrderCreateRequested,
				MessageID: "evt_" + id, MessageKey: "rsv_" + id, CreatedAt: now, Producer: "bench"},
			RequestID: "req_" + id, ReservationID: "rsv_" + id, OrderID: "ord_" + id,
			ActivityID: act.ActivityID, SKUID: act.SKUID, UserID: int64(i + 1), Quantity: 1,
			ReservationCreatedAt: now, ReservationValidUntil: now.Add(time.Hour),
		}
		t := message.CancelOrderIfUnpaid{
			Envelope: message.Envelope{SchemaVersion: message.SchemaV1, EventType: message.TypeCancelOrderIfUnpaid,
				MessageID: "evt_ord_" + id + "_timeout_1", MessageKey: "ord_" + id, CreatedAt: now, Producer: "bench"},
			OrderID: "ord_" + id, ReservationID: "rsv_" + id, ActivityID: act.ActivityID, SKUID: act.SKUID,
			UserID: int64(i + 1), DeliverAt: now.Add(act.PaymentTimeout),
		}
		cb, err := c.Encode()
		if err != nil {
			return ceilingResult{}, err
		}
		tb, err := t.Encode()
		if err != nil {
			return ceilingResult{}, err
		}
		creates = append(creates, ports.Delivery{Topic: "ORDER_CREATE", Body: cb, DeliveryAttempt: 1})
		timeouts = append(timeouts, ports.Delivery{Topic: "ORDER_TIMEOUT", Body: tb, DeliveryAttempt: 1})
	}
	if _, err := runBatches(ctx, create, creates, 32, concurrency, "created"); err != nil {
		return ceilingResult{}, fmt.Errorf("create the ceiling's orders: %w", err)
	}
	// Every order was created before this point, so all have expired
	// once their payment timeout has passed from here.
	time.Sleep(act.PaymentTimeout + 100*time.Millisecond)
	if err := benchenv.Checkpoint(ctx, dsn); err != nil {
		log.Warn("checkpoint before the ceiling failed (needs a superuser or pg_checkpoint); measuring anyway", "error", err)
	}
	cancel := application.NewCancelExpiredOrders(application.NewOrderLifecycle(store, log, policy), store, m, log, "BENCH_CEILING_TIMEOUT")
	start := time.Now()
	canceled, err := runBatches(ctx, cancel, timeouts, batch, concurrency, "canceled")
	elapsed := time.Since(start)
	if err != nil {
		return ceilingResult{}, err
	}
	return ceilingResult{canceled: canceled, elapsed: elapsed}, nil
}

// runBatches hands ds to h in batches of batch, concurrency calls at a
// time, and counts the decisions with outcome want; any other decision is
// an error.
func runBatches(ctx context.Context, h ports.BatchHandler, ds []ports.Delivery, batch, concurrency int, want string) (int, error) {
	var (
		next    atomic.Int64
		counted atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
	)
	for range concurrency {
		wg.Go(func() {
			for {
				from := int(next.Add(int64(batch))) - batch
				if from >= len(ds) || ctx.Err() != nil {
					return
				}
				part := ds[from:min(from+batch, len(ds))]
				for i, d := range h.HandleBatch(ctx, part) {
					if d.Ack && d.Outcome == want {
						counted.Add(1)
						continue
					}
					mu.Lock()
					errs = append(errs, fmt.Errorf("message %d: decision %+v, want %s", from+i, d, want))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return int(counted.Load()), fmt.Errorf("%d unexpected decisions, first: %w", len(errs), errs[0])
	}
	return int(counted.Load()), ctx.Err()
}
