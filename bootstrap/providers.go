package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/failpoint"
	"github.com/seckill-dev/seckill/adapters/metrics"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/system"
	"github.com/seckill-dev/seckill/adapters/tracing"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// InfraSet provides the driven adapters and binds them to their ports.
var InfraSet = wire.NewSet(
	provideTracer,
	provideRegistry,
	wire.Bind(new(prometheus.Registerer), new(*prometheus.Registry)),
	providePostgres,
	wire.Bind(new(ports.UnitOfWork), new(*postgres.Store)),
	wire.Bind(new(ports.OrderQueries), new(*postgres.Store)),
	wire.Bind(new(ports.EventLog), new(*postgres.Store)),
	wire.Bind(new(ports.EventSequencer), new(*postgres.Store)),
	provideRedisGuard,
	provideRedisClient,
	provideRedis,
	wire.Bind(new(ports.StockBooks), new(*redis.Store)),
	wire.Bind(new(ports.Admission), new(*redis.Store)),
	wire.Bind(new(ports.Reservations), new(*redis.Store)),
	wire.Bind(new(ports.Backlog), new(*redis.Store)),
	wire.Bind(new(ports.ActivitySwitch), new(*redis.Store)),
	wire.Bind(new(ports.StockChanger), new(*redis.Store)),
	wire.Bind(new(ports.ConsumerPeers), new(*redis.Store)),
	provideOrderViews,
	provideBroker,
	publisherOf,
	provideMessagingStatus,
	provideMetrics,
	wire.Bind(new(ports.Metrics), new(*metrics.Metrics)),
	provideFailpointRegistry,
	provideFailpoints,
	provideClock,
	system.NewIDs,
	wire.Bind(new(ports.IDGenerator), new(*system.IDs)),
)

// AppSet provides the use cases, the API and the workers.
var AppSet = wire.NewSet(
	provideCompensationPolicy,
	application.NewActivities,
	provideBacklogGate,
	provideQueries,
	provideSentMarker,
	provideSaleRates,
	providePlaceOrder,
	provideLifecycle,
	application.NewOrderService,
	provideReconciler,
	provideStockRecovery,
	provideDeadLetters,
	provideAdmin,
	application.NewActivityOps,
	application.NewBuyerQueries,
	provideStockChanges,
	provideServer,
	provideOpsServer,
	provideHealth,
	provideProjection,
	provideEventLogMetrics,
	provideSequencer,
	provideEventSubscriptions,
	provideConsumerLimits,
	provideScanner,
	provideRelay,
	provideConsumerHandlers,
	wire.Struct(new(apiLoops), "*"),
	wire.Struct(new(workerLoops), "*"),
	provideWorkers,
	wire.Struct(new(App), "*"),
)

func provideRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Tracer is the process's OpenTelemetry tracer provider; its
// TracerProvider is nil when tracing is off, and the adapters then record
// nothing.
type Tracer struct{ trace.TracerProvider }

func provideTracer(ctx context.Context, cfg config.Config, log *slog.Logger) (Tracer, func(), error) {
	p, err := tracing.New(ctx, tracing.Config{Endpoint: cfg.Tracing.Endpoint, ServiceName: cfg.Tracing.ServiceName,
		InstanceID: cfg.InstanceID, SampleRatio: cfg.Tracing.SampleRatio})
	if err != nil {
		return Tracer{}, nil, fmt.Errorf("tracing: %w", err)
	}
	flush := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			log.Warn("flush the last spans", slog.String("error", err.Error()))
		}
	}
	if cfg.Tracing.Endpoint == "" {
		return Tracer{}, flush, nil
	}
	log.Info("tracing on", slog.String("endpoint", cfg.Tracing.Endpoint), slog.Float64("sample_ratio", cfg.Tracing.SampleRatio))
	return Tracer{p}, flush, nil
}

func providePostgres(ctx context.Context, cfg config.Config, reg prometheus.Registerer, tr Tracer, log *slog.Logger) (*postgres.Store, func(), error) {
	s, err := postgres.Open(ctx, postgres.Config{DSN: string(cfg.Postgres.DSN), MaxConns: cfg.Postgres.MaxConns,
		ApplicationName: "seckill-" + cfg.InstanceID, Tracer: tr.TracerProvider}, reg, log.With("adapter", "postgres"))
	if err != nil {
		return nil, nil, fmt.Errorf("open postgres: %w", err)
	}
	return s, s.Close, nil
}

func provideRedisGuard(cfg config.Config, log *slog.Logger) (*redis.Guard, error) {
	return redis.NewGuard(cfg.Redis.Namespace, log.With("adapter", "redis"))
}

// provideRedisClient returns the service's Redis client: one node, or
// Redis Cluster when SECKILL_REDIS_ADDR lists several seed addresses. guard
// checks the Redis process behind every new connection before it is used
// (on a cluster, per master: docs/operations.md).
func provideRedisClient(cfg config.Config, guard *redis.Guard) (goredis.UniversalClient, func(), error) {
	addrs := redis.SplitAddrs(cfg.Redis.Addr)
	o := redis.ClientOptions{Password: string(cfg.Redis.Password), DB: cfg.Redis.DB, PoolSize: 64,
		ReadTimeout: time.Second, WriteTimeout: time.Second, Guard: guard}
	c, err := redis.NewClient(addrs, o)
	if err != nil {
		return nil, nil, fmt.Errorf("redis client: %w", err)
	}
	return c, func() { _ = c.Close() }, nil
}

func provideRedis(c goredis.UniversalClient, guard *redis.Guard, cfg config.Config, reg prometheus.Registerer, tr Tracer, log *slog.Logger) (*redis.Store, error) {
	rc := redis.Config{Namespace: cfg.Redis.Namespace, Tracer: tr.TracerProvider,
		RateLimit:    redis.RateLimit{Capacity: cfg.Redis.RateBurst, RefillPerSecond: cfg.Redis.RatePerSecond},
		OrderViewTTL: cfg.Redis.OrderViewTTL, RequestClaimTTL: cfg.Redis.RequestClaimTTL,
		ReservationRetention: cfg.Redis.ReservationRetention}
	rc.Guard = guard
	return redis.New(c, rc, reg, log.With("adapter", "redis"))
}

func provideOrderViews(s *redis.Store) ports.OrderViews { return s.OrderViews() }

// publisherOf gives the use cases the broker as a ports.Publisher.
func publisherOf(b Broker) ports.Publisher { return b }

func provideClock() ports.Clock { return system.Clock{} }

func provideMetrics(reg prometheus.Registerer) (*metrics.Metrics, error) {
	if err := metrics.RegisterBuildInfo(reg); err != nil {
		return nil, fmt.Errorf("build info metric: %w", err)
	}
	return metrics.New(reg)
}

// provideFailpointRegistry returns the failpoint registry, or nil when no
// failpoint is configured.
func provideFailpointRegistry(cfg config.Config) (*failpoint.Registry, error) {
	if cfg.Failpoints == "" {
		return nil, nil
	}
	return failpoint.New(cfg.Failpoints)
}

// provideFailpoints returns a nil interface when no failpoint is
// configured, so that disabled failpoints cost nothing.
func provideFailpoints(r *failpoint.Registry) ports.Failpoints {
	if r == nil {
		return nil
	}
	return r
}

func provideCompensationPolicy(cfg config.Config) application.CompensationPolicy {
	return application.CompensationPolicy{MaxAttempts: int32(cfg.Orders.CompensationMaxAttempts), Window: cfg.Orders.CompensationWindow}
}

func provideBacklogGate(b ports.Backlog, clock ports.Clock, m ports.Metrics, cfg config.Config, log *slog.Logger) *application.BacklogGate {
	return application.NewBacklogGate(b, clock, m, log, cfg.Orders.BacklogCloseRatio, 250*time.Millisecond)
}

func provideQueries(v ports.OrderViews, q ports.OrderQueries, a ports.Admission, r ports.Reservations) *application.Queries {
	return application.NewQueries(v, q, a, r)
}

func provideSentMarker(r ports.Reservations, log *slog.Logger) *application.SentMarker {
	return application.NewSentMarker(r, log, 8192)
}

func providePlaceOrder(a ports.Admission, r ports.Reservations, p ports.Publisher, acts *application.Activities,
	gate *application.BacklogGate, q *application.Queries, marker *application.SentMarker, ids ports.IDGenerator,
	clock ports.Clock, m ports.Metrics, fp ports.Failpoints, rates *application.SaleRates, cfg config.Config,
	log *slog.Logger) *application.PlaceOrder {
	return application.NewPlaceOrder(a, r, p, acts, gate, q, marker, ids, clock, m, fp, log, application.PlaceOrderConfig{
		RequestClaimTTL: cfg.Redis.RequestClaimTTL, ScanGrace: max(4*cfg.Broker.Neutral.SendTimeout, time.Second),
		SoldOutTTL: cfg.API.SoldOutTTL, Rates: rates})
}

// provideSaleRates is the recorder of this instance's PlaceOrder rates
// per activity SKU, read by the status page.
func provideSaleRates() *application.SaleRates {
	return application.NewSaleRates(application.DefaultSaleRateActivities)
}

func provideLifecycle(uow ports.UnitOfWork, p application.CompensationPolicy, log *slog.Logger) *application.OrderLifecycle {
	return application.NewOrderLifecycle(uow, log, p)
}

func provideReconciler(uow ports.UnitOfWork, r ports.Reservations, acts *application.Activities, life *application.OrderLifecycle,
	clock ports.Clock, m ports.Metrics, p application.CompensationPolicy, cfg config.Config, log *slog.Logger) *application.Reconciler {
	return application.NewReconciler(uow, r, acts, life, clock, m, log, p, application.ReconcileConfig{Grace: cfg.Workers.ReconcileGrace, Batch: 1000})
}

func provideDeadLetters(uow ports.UnitOfWork, p ports.Publisher, r ports.Reservations, ids ports.IDGenerator,
	m ports.Metrics, b Broker, log *slog.Logger) *application.DeadLetters {
	topics := map[string]ports.Topic{}
	for _, s := range ports.Subscriptions() {
		topics[b.Group(s.Group)] = s.Topic
	}
	return application.NewDeadLetters(uow, p, r, ids, m, log, application.DeadLetterConfig{
		ReplayCap: 3, Topics: topics, CreateGroup: b.Group(ports.GroupOrderCreate),
		CompensateGroup: b.Group(ports.GroupInventoryCompensate)})
}

func provideAdmin(uow ports.UnitOfWork, r ports.Reservations, acts *application.Activities, rec *application.Reconciler,
	dl *application.DeadLetters, log *slog.Logger) *application.Admin {
	return application.NewAdmin(uow, r, acts, rec, dl, log)
}

func provideProjection(v ports.OrderViews, q ports.OrderQueries, r ports.Reservations, uow ports.UnitOfWork,
	b Broker, log *slog.Logger) *application.ProjectOrderStates {
	return application.NewProjectOrderStates(v, q, r, uow, log, b.Group(ports.GroupOrderProjection))
}

// provideStockChanges builds the stock changes of running a sale
// (AddStock, RemoveStock) and their recovery worker, with the defaults of
// application.StockChangesConfig.
func provideStockChanges(uow ports.UnitOfWork, sc ports.StockChanger, acts *application.Activities,
	place *application.PlaceOrder, fp ports.Failpoints, log *slog.Logger) *application.StockChanges {
	return application.NewStockChanges(uow, sc, acts, place, fp, log, application.StockChangesConfig{})
}

// provideServer builds the API server.
func provideServer(cfg config.Config, orders *application.OrderService, admin *application.Admin,
	ops *application.ActivityOps, buyers *application.BuyerQueries, stock *application.StockChanges,
	events *application.EventSubscriptions, health *Health, reg *prometheus.Registry, tr Tracer, log *slog.Logger) (*api.Server, error) {
	auth, err := NewAuthenticator(context.Background(), cfg, log)
	if err != nil {
		return nil, err
	}
	rpc, err := api.NewRPCMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("rpc metrics: %w", err)
	}
	h, err := api.NewHandler(orders, admin, events, auth, log, api.Limits{
		MaxBodyBytes: int64(cfg.API.MaxBodyBytes), MaxMessageBytes: cfg.API.MaxBodyBytes,
		PlaceOrderConcurrency: cfg.API.PlaceOrderConcurrency, ReadRate: cfg.API.ReadRate, ReadBurst: cfg.API.ReadBurst,
		PayRate: cfg.API.PayRate, PayBurst: cfg.API.PayBurst, ClientRate: cfg.API.ClientRate, ClientBurst: cfg.API.ClientBurst,
		MaxRateKeys: cfg.API.RateKeys, EventStreams: cfg.Events.MaxStreams, EventSendTimeout: cfg.Events.SendTimeout,
	}, health, api.Observability{Metrics: rpc, Tracer: tr.TracerProvider},
		api.WithSale(api.Sale{Activities: ops, Stock: stock, Buyers: buyers}))
	if err != nil {
		return nil, err
	}
	l := api.DefaultServerLimits()
	l.ReadTimeout = cfg.API.ReadTimeout
	l.MaxConns, l.MaxConnsPerClient = cfg.API.MaxConns, cfg.API.MaxConnsPerClient
	srv := api.NewServer(cfg.HTTPAddr, h, log, l)
	if err := srv.RegisterConnMetrics(reg, "api"); err != nil {
		return nil, fmt.Errorf("connection metrics: %w", err)
	}
	return srv, nil
}

// NewAuthenticator returns the API's token verifier for cfg: the JWKS
// mode when SECKILL_AUTH_JWKS is set (the set is read before it returns:
// one that cannot be read, or holds no usable key, is an error naming the
// variable, and the service does not start), else HS256 with
// SECKILL_AUTH_SECRET. Both apply SECKILL_AUTH_ISSUER,
// SECKILL_AUTH_AUDIENCE and SECKILL_AUTH_MAX_TOKEN_LIFETIME.
func NewAuthenticator(ctx context.Context, cfg config.Config, log *slog.Logger) (*api.Authenticator, error) {
	o := api.AuthOptions{Issuer: cfg.Auth.Issuer, Audience: cfg.Auth.Audience, MaxLifetime: cfg.Auth.MaxTokenLifetime,
		Log: log.With("component", "auth")}
	if cfg.Auth.JWKS == "" {
		o.Secret = []byte(cfg.AuthSecret)
	} else {
		o.JWKS, o.JWKSRefresh = cfg.Auth.JWKS, cfg.Auth.JWKSRefresh
	}
	a, err := api.NewAuthenticatorWith(ctx, o)
	if err != nil {
		if cfg.Auth.JWKS != "" {
			return nil, fmt.Errorf("SECKILL_AUTH_JWKS (%s): %w", cfg.Auth.JWKS, err)
		}
		return nil, fmt.Errorf("SECKILL_AUTH_SECRET: %w", err)
	}
	return a, nil
}

// OpsServer is the operations listener (/metrics, /healthz, reflection),
// a type of its own so that Wire tells it from the API server.
type OpsServer struct{ *api.Server }

func provideOpsServer(cfg config.Config, reg *prometheus.Registry, health *Health, status *StatusPage, log *slog.Logger) OpsServer {
	alive := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	routes := []api.Route{
		{Pattern: "/metrics", Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})},
		{Pattern: "/livez", Handler: alive},
		{Pattern: "/healthz", Handler: alive},
		{Pattern: "GET /status", Handler: status.Handler()}, {Pattern: "GET /status.json", Handler: status.JSONHandler()},
		{Pattern: "/readyz", Handler: health.ReadyHandler()},
	}
	if cfg.OpsPprof {
		routes = append(routes,
			api.Route{Pattern: "GET /debug/pprof/", Handler: http.HandlerFunc(pprof.Index)},
			api.Route{Pattern: "GET /debug/pprof/profile", Handler: http.HandlerFunc(pprof.Profile)},
			api.Route{Pattern: "GET /debug/pprof/trace", Handler: http.HandlerFunc(pprof.Trace)},
			api.Route{Pattern: "GET /debug/pprof/symbol", Handler: http.HandlerFunc(pprof.Symbol)})
	}
	h := api.NewOpsHandler(api.OpsOptions{Token: string(cfg.OpsToken), Hosts: cfg.OpsHosts}, routes...)
	// Reflection streams: no read timeout on this listener.
	l := api.DefaultServerLimits()
	l.ReadTimeout = 0
	return OpsServer{api.NewServer(cfg.OpsAddr, h, log, l)}
}

// LoggerFor builds the JSON logger of the process.
func LoggerFor(cfg config.Config) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel})).
		With("service", "seckill", "instance", cfg.InstanceID)
}

func provideStockRecovery(books ports.StockBooks, uow ports.UnitOfWork, cfg config.Config, log *slog.Logger) *application.StockRecovery {
	return application.NewStockRecovery(books, uow, log, application.StockRecoveryConfig{Settle: cfg.Workers.RecoverySettle})
}

// eventLogMetrics is the Prometheus side of application.EventLogMetrics,
// on the service's registry.
type eventLogMetrics struct {
	head      prometheus.Gauge
	sequenced prometheus.Counter
	active    prometheus.Gauge
	delivered prometheus.Counter
}

func provideEventLogMetrics(reg prometheus.Registerer) (application.EventLogMetrics, error) {
	m := &eventLogMetrics{
		head: prometheus.NewGauge(prometheus.GaugeOpts{Name: "event_log_head_position",
			Help: "Highest position the event log has assigned, as last seen by this instance's sequencer."}),
		sequenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "event_log_sequenced_total",
			Help: "Order events given a position by this instance's sequencer."}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "event_subscriptions_active",
			Help: "EventService subscriptions open on this instance."}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{Name: "event_subscription_delivered_total",
			Help: "Events handed to subscribers by this instance."}),
	}
	for _, c := range []prometheus.Collector{m.head, m.sequenced, m.active, m.delivered} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("event log metrics: %w", err)
		}
	}
	return m, nil
}

// Head implements application.EventLogMetrics.
func (m *eventLogMetrics) Head(position int64) { m.head.Set(float64(position)) }

// Sequenced implements application.EventLogMetrics.
func (m *eventLogMetrics) Sequenced(n int) { m.sequenced.Add(float64(n)) }

// SubscriptionStarted implements application.EventLogMetrics.
func (m *eventLogMetrics) SubscriptionStarted() { m.active.Inc() }

// SubscriptionEnded implements application.EventLogMetrics.
func (m *eventLogMetrics) SubscriptionEnded() { m.active.Dec() }

// Delivered implements application.EventLogMetrics.
func (m *eventLogMetrics) Delivered(n int) { m.delivered.Add(float64(n)) }

// provideSequencer builds the event sequencer; it runs as a worker of the
// workers role (provideWorkers), and its signal wakes this process's live
// subscriptions.
func provideSequencer(seq ports.EventSequencer, l ports.EventLog, m application.EventLogMetrics, cfg config.Config,
	log *slog.Logger) *application.Sequencer {
	return application.NewSequencer(seq, l, m, log, application.SequencerConfig{
		Batch: cfg.Events.SequenceBatch, Interval: cfg.Events.SequenceInterval,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 5 * time.Second})
}

// provideEventSubscriptions builds the driving side of
// EventService.Subscribe, with a window of SECKILL_EVENT_WINDOW events
// (none when 0) that its tail reader, a worker of every role that serves
// the API (provideWorkers), keeps for the live subscriptions. Without a
// sequencer running in this process (the API role) the tail reader (and a
// subscription reading the store) sees new positions by polling.
func provideEventSubscriptions(l ports.EventLog, seq *application.Sequencer, m application.EventLogMetrics, cfg config.Config,
	log *slog.Logger) *application.EventSubscriptions {
	if !cfg.RunsWorkers() {
		seq = nil
	}
	window := cfg.Events.Window
	if window == 0 {
		window = -1 // no window
	}
	return application.NewEventSubscriptions(l, seq, m, log, application.SubscriptionConfig{
		Poll: cfg.Events.PollInterval, CheckpointEvery: cfg.Events.CheckpointInterval, Window: window})
}
