package benchconsume

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/failpoint"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/adapters/testkit/pgpair"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/pgcpu"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// consumeOptions are the flags of `seckill-bench consume`.
type consumeOptions struct {
	n           int
	batches     []int
	concurrency int
	sweep       string
	slow        time.Duration
	pgCPU       float64
	standby     string
}

// Run is `seckill-bench consume` with the command-line flags args: it
// publishes N order-create messages for one hot SKU through the real
// broker (SECKILL_BROKER), then lets the order-create consumer drain them
// into PostgreSQL and reports orders created per second on stdout, once
// per batch size of --batches (or per concurrency of --sweep), and checks
// the invariants on the result. A bad flag is an error wrapping
// flag.ErrHelp.
//
// With --pg-cpu, PostgreSQL runs in a CPU cgroup of that many cores from
// before the first mode to the end of the last, the cap undone on return
// whatever the outcome (an error, a cancellation by SIGINT); each mode
// reports the cores PostgreSQL used while it was measured.
func Run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	o, err := parseConsumeFlags(args)
	if err != nil {
		return err
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	if o.concurrency == 0 {
		o.concurrency = cfg.ConsumerConcurrency()
	}
	if o.standby != "" {
		pair, err := pgpair.Start(ctx, pgpair.Options{Synchronous: o.standby == "sync", Durable: true})
		if err != nil {
			return err
		}
		defer pair.Close()
		cfg.Postgres.DSN = config.Secret(pair.Primary.URL("postgres"))
		fmt.Fprintf(stdout, "PostgreSQL: a private primary (port %d) with a %s standby (port %d)\n", pair.Primary.Port, o.standby, pair.Standby.Port)
	}
	rc, releaseRedis, err := benchenv.ScratchRedis(ctx, cfg, 0)
	if err != nil {
		return err
	}
	defer releaseRedis()
	if o.pgCPU > 0 {
		capped, cerr := capStackPostgres(o.pgCPU)
		if cerr != nil {
			return cerr
		}
		defer func() {
			if rerr := capped.Restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}()
		fmt.Fprintf(stdout, "%s\n", capped)
	}
	if o.sweep != "" {
		levels, err := salekit.IntList(o.sweep)
		if err != nil {
			return err
		}
		return consumeSweep(ctx, stdout, cfg, rc, log, consumeRun{n: o.n, batch: slices.Max(o.batches), slow: o.slow}, levels)
	}
	return compareBatches(ctx, stdout, cfg, rc, log, o)
}

// parseConsumeFlags parses the flags of `seckill-bench consume` into
// consumeOptions; a --pg-cpu or --pg-standby out of range is an error
// wrapping flag.ErrHelp, a malformed --batches list the list's error.
func parseConsumeFlags(args []string) (consumeOptions, error) {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	var o consumeOptions
	fs.IntVar(&o.n, "messages", 20000, "messages (and units of stock) per mode")
	modes := fs.String("batches", "1,32", "batch sizes to compare (1 = one message per transaction)")
	fs.IntVar(&o.concurrency, "concurrency", 0, "concurrent transactions (default: the PostgreSQL pool budget)")
	fs.StringVar(&o.sweep, "sweep", "", "instead of --batches: these fixed concurrencies (e.g. 4,8,16,22,32), then the adaptive limiter (budget: the largest), batches of the largest --batches size")
	fs.DurationVar(&o.slow, "slow", 0, "with --sweep: a delay inside every order-create transaction (PostgreSQL slowed), e.g. 20ms")
	fs.Float64Var(&o.pgCPU, "pg-cpu", 0, "cap the local stack's PostgreSQL (the postmaster and its backends) at this many cores with a CPU cgroup "+
		"for the whole run, restored at the end (needs root; 0 = no cap)")
	fs.StringVar(&o.standby, "pg-standby", "", "run every mode on a private PostgreSQL primary with a streaming standby (the local stack's settings) instead "+
		"of the stack's PostgreSQL: sync (synchronous commits, the durability docs/operations.md chooses) or async")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.pgCPU < 0 {
		return o, fmt.Errorf("--pg-cpu %v: want a number of cores, 0 for no cap: %w", o.pgCPU, flag.ErrHelp)
	}
	if o.standby != "" && o.standby != "sync" && o.standby != "async" || o.standby != "" && o.pgCPU > 0 {
		return o, fmt.Errorf("--pg-standby %q: want sync or async, and no --pg-cpu beside it: %w", o.standby, flag.ErrHelp)
	}
	var err error
	if o.batches, err = salekit.IntList(*modes); err != nil {
		return o, err
	}
	return o, nil
}

// compareBatches measures each batch size of --batches through the broker,
// then the handler-alone ceiling at the largest, and prints a row for each
// and how the best compares with the ceiling.
func compareBatches(ctx context.Context, stdout io.Writer, cfg config.Config, rc *goredis.Client, log *slog.Logger, o consumeOptions) error {
	fmt.Fprintf(stdout, "seckill-bench consume: %s, %d cores, %d messages per mode for one hot SKU, %d concurrent transactions, PostgreSQL pool %d, fresh database\n\n",
		benchenv.BrokerText(cfg), runtime.NumCPU(), o.n, o.concurrency, cfg.Postgres.MaxConns)
	fmt.Fprintln(stdout, consumeHeader())
	var best float64
	for _, batch := range o.batches {
		res, err := consumeMode(ctx, cfg, rc, log, consumeRun{n: o.n, batch: batch, concurrency: o.concurrency})
		if err != nil {
			return err
		}
		name := fmt.Sprintf("batch %d per transaction", batch)
		if batch == 1 {
			name = "one message per transaction"
		}
		best = max(best, res.rate())
		fmt.Fprintf(stdout, "%-32s %s\n", name, res)
	}
	// The ceiling: the same transactions handed to the handler directly,
	// without the broker (no receive, no acknowledgement).
	ceilingBatch := slices.Max(o.batches)
	var cpuNote string
	res, err := consumeMode(ctx, cfg, rc, log, consumeRun{n: o.n, batch: ceilingBatch, concurrency: o.concurrency, direct: true,
		notes: func(s string) { cpuNote = s }})
	if err != nil {
		return err
	}
	ceiling := res.rate()
	fmt.Fprintf(stdout, "%-32s %s\n", fmt.Sprintf("ceiling: handler alone, batch %d", ceilingBatch), res)
	if cpuNote != "" {
		fmt.Fprintf(stdout, "%-32s %s\n", "", cpuNote)
	}
	fmt.Fprintf(stdout, "\nconsumer through the broker: %.2fx the handler-alone ceiling\n", best/ceiling)
	return nil
}

// consumeSetup is what one mode of consumeMode measures on: its scratch
// database and store, its Redis namespace's store, the activity and its
// order-create messages, and the handler's compensation policy and
// failpoints.
type consumeSetup struct {
	cfg    config.Config
	log    *slog.Logger
	dsn    string
	store  *postgres.Store
	rs     *redis.Store
	acts   *application.Activities
	act    ports.Activity
	msgs   []ports.OutboundMessage
	policy application.CompensationPolicy
	fp     ports.Failpoints
}

// consumeMode measures one batch size from a clean start: a fresh
// database, a checkpoint, a fresh Redis namespace and a broker namespace of
// its own (fresh topics and groups), so no mode pays for another's
// leftovers. direct hands the same messages to the order-create handler in
// batches from concurrency goroutines instead of through the broker: the
// ceiling of the database and the handler. The result holds the cores
// PostgreSQL used while the mode was measured.
func consumeMode(ctx context.Context, cfg config.Config, rc *goredis.Client, log *slog.Logger, run consumeRun) (consumeResult, error) {
	s := &consumeSetup{cfg: cfg, log: log}
	dsn, dropDB, err := benchenv.ScratchDatabase(ctx, string(cfg.Postgres.DSN), log)
	if err != nil {
		return consumeResult{}, err
	}
	defer dropDB()
	s.dsn = dsn
	if s.store, err = postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: cfg.Postgres.MaxConns}, prometheus.NewRegistry(), log); err != nil {
		return consumeResult{}, err
	}
	defer s.store.Close()
	ns := fmt.Sprintf("bench%d", time.Now().UnixNano())
	if s.rs, err = redis.New(rc, redis.Config{Namespace: ns}, nil, log); err != nil {
		return consumeResult{}, err
	}
	s.acts = application.NewActivities(s.store)
	admin := application.NewAdmin(s.store, s.rs, s.acts, nil, nil, log)
	s.act = ports.Activity{ActivityID: salekit.BenchActivityID(), SKUID: 1, Stock: int64(run.n),
		StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: time.Hour}
	if _, err := admin.CreateActivity(ctx, "system:bench", s.act); err != nil {
		return consumeResult{}, err
	}
	if s.msgs, err = orderMessages(s.act, run.n); err != nil {
		return consumeResult{}, err
	}
	s.policy = application.CompensationPolicy{MaxAttempts: 5, Window: time.Hour}
	if run.slow > 0 {
		reg, err := failpoint.New(fmt.Sprintf("%s=delay(%s)", ports.FailConsumerInTx, run.slow))
		if err != nil {
			return consumeResult{}, err
		}
		s.fp = reg
	}
	if run.direct {
		return s.measureDirect(ctx, run)
	}
	return s.measureThroughBroker(ctx, run)
}

// checkpoint runs a checkpoint on the mode's database before measuring,
// and only warns when it fails.
func (s *consumeSetup) checkpoint(ctx context.Context) {
	if err := benchenv.Checkpoint(ctx, s.dsn); err != nil {
		s.log.Warn("checkpoint before measuring failed (needs a superuser or pg_checkpoint); measuring anyway", "error", err)
	}
}

// measureDirect hands the mode's messages to the order-create handler
// directly (no broker), run.batch per call from run.concurrency
// goroutines, with this process's and PostgreSQL's CPU metered, and
// returns what was measured; the CPU per order goes to run's notes.
func (s *consumeSetup) measureDirect(ctx context.Context, run consumeRun) (consumeResult, error) {
	s.checkpoint(ctx)
	const topic, group = "direct", "direct"
	handler := application.NewCreateOrders(s.store, s.rs, s.acts, s.fp, s.log, group, s.policy)
	pg, err := benchenv.StackMeteredProc("postgres", true)
	if err != nil {
		return consumeResult{}, err
	}
	cpu, err := benchenv.StartCPUMeter(benchenv.SelfProc(), pg)
	if err != nil {
		return consumeResult{}, err
	}
	start := time.Now()
	if err := handleDirect(ctx, handler, topic, s.msgs, run.batch, run.concurrency); err != nil {
		return consumeResult{}, err
	}
	created, err := waitOrders(ctx, s.store, s.act, run.n, 5*time.Minute)
	if err != nil {
		return consumeResult{}, err
	}
	elapsed := time.Since(start)
	pgCores := -1.0
	if per, err := cpu.PerUnit(int64(created)); err == nil {
		run.report(fmt.Sprintf("handler alone, CPU per order: %.0f µs (this process %.0f, PostgreSQL %.0f)", per[0]+per[1], per[0], per[1]))
		pgCores = per[1] * float64(created) / 1e6 / elapsed.Seconds()
	} else {
		s.log.Warn("the handler-alone CPU was not read", "error", err)
	}
	return consumeResult{created: created, elapsed: elapsed, check: checkOrders(ctx, s.store, s.act, run.n), pgCores: pgCores}, nil
}

// measureThroughBroker publishes the mode's messages on a broker
// namespace of its own, then lets the order-create consumer (under the
// adaptive limiter when run.adaptive) drain them, with PostgreSQL's CPU
// metered, and returns what was measured; the limiter's last state goes
// to run's notes.
func (s *consumeSetup) measureThroughBroker(ctx context.Context, run consumeRun) (consumeResult, error) {
	env, err := benchenv.NewNamespace(ctx, s.cfg, s.log)
	if err != nil {
		return consumeResult{}, err
	}
	defer env.Close()
	pub, closePub, err := env.Publisher(ctx, 2*time.Second, s.log)
	if err != nil {
		return consumeResult{}, err
	}
	defer closePub()
	if err := publishOrders(ctx, pub, s.msgs); err != nil {
		return consumeResult{}, err
	}
	s.checkpoint(ctx)
	consume, limits, err := s.orderConsumer(env, run)
	if err != nil {
		return consumeResult{}, err
	}
	pgMeter := startPostgresMeter(s.log)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	start := time.Now()
	go func() { done <- consume(runCtx) }()
	if limits != nil {
		go func() { done <- limits.Run(runCtx) }()
	}
	created, err := waitOrders(ctx, s.store, s.act, run.n, 5*time.Minute)
	elapsed := time.Since(start)
	pgCores := pgMeter.cores(elapsed, s.log)
	stop()
	for range 1 + btoi(limits != nil) {
		if rerr := <-done; rerr != nil && err == nil {
			err = rerr
		}
	}
	if limits != nil {
		st := limits.States()[0]
		run.report(fmt.Sprintf("limit at the end %d (budget %d), last decision %s/%s, decisions %v",
			st.Limit, st.Budget, st.Last.Action, st.Last.Reason, st.Decisions))
	}
	if err != nil {
		return consumeResult{}, err
	}
	return consumeResult{created: created, elapsed: elapsed, check: checkOrders(ctx, s.store, s.act, run.n), pgCores: pgCores}, nil
}

// orderConsumer builds the order-create consumer of env's group: its
// handler on the mode's store and, when run.adaptive, the adaptive limits
// it runs under. It returns the consumer's run function and the limits
// (nil when not adaptive).
func (s *consumeSetup) orderConsumer(env *benchenv.Namespace, run consumeRun) (func(context.Context) error, *application.ConsumerLimits, error) {
	sub, _ := ports.SubscriptionOf(ports.GroupOrderCreate)
	handler := application.NewCreateOrders(s.store, s.rs, s.acts, s.fp, s.log, env.Group(sub.Group), s.policy)
	var limit ports.ConcurrencyLimit
	var limits *application.ConsumerLimits
	if run.adaptive {
		var err error
		limits, err = benchLimits(s.store, env.Group(sub.Group), run.batch, run.concurrency, s.log)
		if err != nil {
			return nil, nil, err
		}
		limit = limits.Limit(env.Group(sub.Group))
	}
	consume, err := env.Consumer(sub, handler, run.batch, run.concurrency, limit, s.log)
	if err != nil {
		return nil, nil, err
	}
	return consume, limits, nil
}

// handleDirect hands msgs to handler in batches of batch from concurrency
// goroutines, as the runner would after a receive; a batch whose decisions
// are not all acknowledgements is an error.
func handleDirect(ctx context.Context, handler ports.BatchHandler, topic string, msgs []ports.OutboundMessage, batch, concurrency int) error {
	work := make(chan []ports.Delivery)
	errc := make(chan error, concurrency)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ds := range work {
				for i, d := range handler.HandleBatch(ctx, ds) {
					if !d.Ack {
						errc <- fmt.Errorf("message %s not acknowledged: %s %s", ds[i].Properties[message.PropMessageID], d.Outcome, d.Reason)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < len(msgs); i += batch {
		end := min(i+batch, len(msgs))
		ds := make([]ports.Delivery, 0, end-i)
		for _, m := range msgs[i:end] {
			ds = append(ds, ports.Delivery{Topic: topic, Tag: m.Tag, Keys: m.Keys, Body: m.Body, Properties: m.Properties,
				BrokerMessageID: m.MessageID, DeliveryAttempt: 1, BornAt: time.Now()})
		}
		select {
		case work <- ds:
		case err := <-errc:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// orderMessages builds n valid order-create messages for act (distinct
// users and reservations).
func orderMessages(act ports.Activity, n int) ([]ports.OutboundMessage, error) {
	now := time.Now().UTC()
	msgs := make([]ports.OutboundMessage, n)
	for i := range msgs {
		id := fmt.Sprintf("%d_%d", act.ActivityID, i)
		m := message.OrderCreateRequested{
			Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeOrderCreateRequested,
				MessageID: "evt_" + id, MessageKey: "rsv_" + id, CreatedAt: now, Producer: "bench"},
			RequestID: "req_" + id, ReservationID: "rsv_" + id, OrderID: "ord_" + id,
			ActivityID: act.ActivityID, SKUID: 1, UserID: int64(i + 1), Quantity: 1,
			ReservationCreatedAt: now, ReservationValidUntil: now.Add(time.Hour),
		}
		body, err := m.Encode()
		if err != nil {
			return nil, fmt.Errorf("build message %d: %w", i, err)
		}
		msgs[i] = ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: m.MessageID, Tag: message.TagCreateOrder,
			Keys: []string{m.ReservationID}, Body: body, Properties: m.Properties()}
	}
	return msgs, nil
}

// publishOrders sends msgs (orderMessages) to the broker.
func publishOrders(ctx context.Context, pub ports.Publisher, msgs []ports.OutboundMessage) error {
	n := len(msgs)
	res, err := benchkit.SendLoop(ctx, pub, n, 32, func(i int) ports.OutboundMessage { return msgs[i] })
	if err != nil {
		return err
	}
	if res.Confirmed != n {
		return fmt.Errorf("published %d of %d messages (%s)", res.Confirmed, n, res)
	}
	return nil
}

// waitOrders polls until n reservations of act are decided.
func waitOrders(ctx context.Context, store *postgres.Store, act ports.Activity, n int, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		var audit ports.StockAudit
		err := store.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			var err error
			audit, err = tx.AuditStock(ctx, act.ActivityID, act.SKUID, nil)
			return err
		})
		if err != nil {
			return 0, err
		}
		if audit.NonCanceledOrders >= int64(n) {
			return int(audit.NonCanceledOrders), nil
		}
		if time.Now().After(deadline) {
			return int(audit.NonCanceledOrders), fmt.Errorf("only %d of %d orders after %s", audit.NonCanceledOrders, n, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOrders verifies I1-I3 on the result: orders = stock, final stock 0.
func checkOrders(ctx context.Context, store *postgres.Store, act ports.Activity, n int) string {
	var audit ports.StockAudit
	err := store.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		audit, err = tx.AuditStock(ctx, act.ActivityID, act.SKUID, nil)
		return err
	})
	switch {
	case err != nil:
		return "check failed: " + err.Error()
	case audit.NonCanceledOrders != int64(n) || audit.PGFinalStock != 0 || audit.NonCanceledOrders+audit.PGFinalStock != audit.InitialStock:
		return fmt.Sprintf("VIOLATED: orders %d final stock %d initial %d", audit.NonCanceledOrders, audit.PGFinalStock, audit.InitialStock)
	}
	return "hold (orders = stock, final stock 0)"
}

// capStackPostgres caps the local stack's PostgreSQL (the postmaster of
// its pid file and the backends) at cores CPUs (pgcpu.CapPostgres); the
// caller restores it.
func capStackPostgres(cores float64) (*pgcpu.Cap, error) {
	pid, err := benchenv.StackPID("postgres") // the postmaster, as the stack recorded it
	if err != nil {
		return nil, err
	}
	return pgcpu.CapPostgres(pid, cores)
}
