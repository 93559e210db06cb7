package main

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
)

// benchTimeouts measures the timeout wave: it sells N units through the
// real service (Connect API, every worker running) with a short payment
// timeout, lets every order expire unpaid and reports how late the orders
// were canceled against their expires_at (canceled_at - expires_at from
// the orders table), how long after the last deadline the last unit was
// for sale again in Redis, and the cancel and release rates; beside it, in
// the same run and on the same database, the PostgreSQL ceiling of the
// cancel transactions (the payment-timeout handler called directly on
// expired orders, without the broker). The reconciler is off unless
// --reconcile-interval says otherwise, so the consumers alone are measured.
func benchTimeouts(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("timeouts", flag.ContinueOnError)
	units := fs.Int("units", 3000, "units sold, one order each; nobody pays")
	paymentTimeout := fs.Duration("payment-timeout", 30*time.Second, "payment timeout of the sale")
	clients := fs.Int("clients", 64, "concurrent buyers while selling")
	sellOver := fs.Duration("sell-over", 12*time.Second, "spread the purchases evenly over this long, so the deadlines spread alike (0: as fast as possible)")
	ceilingBatch := fs.Int("ceiling-batch", 16, "timeout messages per handler call in the PostgreSQL ceiling (the consumer's batch)")
	ceilingConcurrency := fs.Int("ceiling-concurrency", 4, "concurrent handler calls in the PostgreSQL ceiling (the consumer's)")
	reconcile := fs.Duration("reconcile-interval", 0, "run the reconciler this often during the wave (0: off)")
	within := fs.Duration("within", 3*time.Minute, "give up when the wave is not over this long after the last deadline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *units <= 0 || *clients <= 0 || *ceilingBatch <= 0 || *ceilingConcurrency <= 0 || *paymentTimeout <= 0 {
		return fmt.Errorf("units, clients, payment timeout and ceiling settings must be > 0: %w", flag.ErrHelp)
	}
	cfg, log, err := loadConfig()
	if err != nil {
		return err
	}
	sc, err := newScratch(ctx, cfg, log, 0)
	if err != nil {
		return err
	}
	defer sc.Close()
	cfg, dsn, rc := sc.cfg, sc.dsn, sc.redis
	cfg.Workers.ReconcileInterval = *reconcile
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
	defer func() { _ = stopApp() }()
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a.String()
	case err := <-done:
		stopped = true
		return err
	}

	fmt.Fprintf(stdout, "seckill-bench timeouts: %s, %d cores (GOMAXPROCS %d), %d units sold over %s by %d buyers, payment timeout %s, reconciler %s\n\n",
		brokerText(cfg), runtime.NumCPU(), runtime.GOMAXPROCS(0), *units, *sellOver, *clients, *paymentTimeout, onOff(*reconcile))
	act := ports.Activity{ActivityID: benchActivityID(), SKUID: 1, Stock: int64(*units),
		StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		PaymentTimeout: *paymentTimeout, ReservationTTL: 10 * time.Minute}
	if _, err := app.Admin.CreateActivity(ctx, "system:bench", act); err != nil {
		return err
	}
	sold, err := sellUnits(ctx, base, []byte(cfg.AuthSecret), act, *units, *clients, *sellOver)
	if err != nil {
		return err
	}
	if err := waitCount(ctx, pool, `SELECT count(*) FROM orders WHERE activity_id = $1`, act.ActivityID, *units, *paymentTimeout); err != nil {
		return fmt.Errorf("orders of the sale: %w", err)
	}
	var firstCreated, lastCreated, firstDeadline, lastDeadline time.Time
	if err := pool.QueryRow(ctx, `SELECT min(created_at), max(created_at), min(expires_at), max(expires_at)
		FROM orders WHERE activity_id = $1`, act.ActivityID).Scan(&firstCreated, &lastCreated, &firstDeadline, &lastDeadline); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sold %d units in %s through the API; orders created over %s; deadlines from %s to %s (%s apart)\n",
		*units, sold.Round(time.Millisecond), lastCreated.Sub(firstCreated).Round(time.Millisecond),
		firstDeadline.Format("15:04:05.000"), lastDeadline.Format("15:04:05.000"), lastDeadline.Sub(firstDeadline).Round(time.Millisecond))

	w, err := watchWave(ctx, pool, rs, act, *units, lastDeadline.Add(*within))
	if err != nil {
		return err
	}
	if err := stopApp(); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	// The outbox rows of this run's compensation tasks (the ceiling below
	// publishes none): when the relay handed the last one to the broker.
	var lastRelayed time.Time
	if err := pool.QueryRow(ctx, `SELECT max(published_at) FROM event_outbox WHERE tag = $1`,
		message.TagReleaseReservation).Scan(&lastRelayed); err != nil {
		return err
	}
	lateness, early, err := cancelLateness(ctx, pool, act.ActivityID)
	if err != nil {
		return err
	}
	var lastCanceled time.Time
	if err := pool.QueryRow(ctx, `SELECT max(canceled_at) FROM orders WHERE activity_id = $1`, act.ActivityID).Scan(&lastCanceled); err != nil {
		return err
	}
	ceiling, err := cancelCeiling(ctx, cfg, dsn, rs, log, *units, *ceilingBatch, *ceilingConcurrency)
	if err != nil {
		return fmt.Errorf("PostgreSQL ceiling: %w", err)
	}

	wave := float64(*units)
	fmt.Fprintf(stdout, "\n%-58s %12s\n", "measurement", "value")
	row := func(name, value string) { fmt.Fprintf(stdout, "%-58s %12s\n", name, value) }
	row("cancel lateness p50 (canceled_at - expires_at)", secs(lateness.percentile(0.50)))
	row("cancel lateness p99", secs(lateness.percentile(0.99)))
	row("cancel lateness max", secs(lateness.percentile(1)))
	row("cancels before expires_at (must be 0)", fmt.Sprint(early))
	row("last cancel after the last deadline", secs(lastCanceled.Sub(lastDeadline)))
	row("last compensation task relayed after the last deadline", secs(lastRelayed.Sub(lastDeadline)))
	row("last unit for sale again in Redis after the last deadline", secs(w.lastBack.Sub(lastDeadline)))
	row("deadlines/s (the wave's arrival rate)", rate(wave, lastDeadline.Sub(firstDeadline)))
	row("cancels/s (first deadline to last cancel)", rate(wave, lastCanceled.Sub(firstDeadline)))
	row("releases/s (first deadline to last unit back in Redis)", rate(wave, w.lastBack.Sub(firstDeadline)))
	row(fmt.Sprintf("ceiling: PostgreSQL cancels/s (batch %d, %d concurrent)", *ceilingBatch, *ceilingConcurrency), rate(float64(ceiling.canceled), ceiling.elapsed))
	fmt.Fprintf(stdout, "\ninvariants: %s\n", w.check)
	return nil
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
func cancelLateness(ctx context.Context, pool *pgxpool.Pool, activityID int64) (latencies, int, error) {
	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM canceled_at - expires_at)::float8 FROM orders
		WHERE activity_id = $1 AND status = 'CANCELED' AND cancel_reason = 'PAYMENT_TIMEOUT'`, activityID)
	if err != nil {
		return nil, 0, err
	}
	seconds, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return nil, 0, fmt.Errorf("read cancel lateness: %w", err)
	}
	lat := make(latencies, len(seconds))
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
	act := ports.Activity{ActivityID: benchActivityID(), SKUID: 1, Stock: int64(n),
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
	if err := checkpoint(ctx, dsn); err != nil {
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
