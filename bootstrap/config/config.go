// Package config loads the service's configuration from environment
// variables into one typed struct, with defaults that fit the local stack
// started by deploy/local/stack.sh, and validates it at start. The reader
// that loads it also records every variable it reads with its default and
// meaning, so the listing of Settings (`seckill config`) is always the
// variables Load reads. Secrets are masked whenever the configuration is
// logged or listed.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
)

// DevAuthSecret is the default token secret for the local stack only. A
// service started with it logs a warning.
const DevAuthSecret = "seckill-local-development-secret"

// Secret is a string that never prints.
type Secret string

// String masks the secret.
func (Secret) String() string { return "****" }

// LogValue masks the secret in slog output.
func (Secret) LogValue() slog.Value { return slog.StringValue("****") }

// Config is the whole configuration.
type Config struct {
	// HTTPAddr is where the Connect API and gRPC health listen
	// (SECKILL_HTTP_ADDR).
	HTTPAddr string
	// OpsAddr is where the operations endpoints listen: /metrics,
	// /healthz and gRPC reflection (SECKILL_OPS_ADDR, loopback by
	// default; keep it off public interfaces).
	OpsAddr string
	// AuthSecret signs and verifies HS256 tokens (SECKILL_AUTH_SECRET)
	// when no JWKS is configured. The development default is accepted
	// only on the local stack (LocalStack).
	AuthSecret Secret
	// Auth configures the verification of tokens beyond the secret.
	Auth Auth
	// LocalStack says the service runs on the local development stack
	// (SECKILL_LOCAL_STACK=true, exported by deploy/local/stack.sh up):
	// only then are the public development secret and an operations
	// listener without a token accepted. No address implies it.
	LocalStack bool
	// OpsToken is the bearer token the operations listener asks of every
	// request (SECKILL_OPS_TOKEN); it may be empty only on the local
	// stack.
	OpsToken Secret
	// OpsHosts are the host names the operations listener accepts in the
	// Host header besides IP literals and localhost (SECKILL_OPS_HOSTS,
	// comma-separated).
	OpsHosts []string
	// OpsPprof serves Go's runtime profiles under /debug/pprof/ on the
	// operations listener, behind its token (SECKILL_OPS_PPROF).
	OpsPprof bool
	// API bounds what callers may cost.
	API API
	// LogLevel is debug, info, warn or error (SECKILL_LOG_LEVEL).
	LogLevel slog.Level
	// InstanceID names this process in leases and logs
	// (SECKILL_INSTANCE_ID, default host-pid).
	InstanceID string

	// Broker chooses the broker adapter and holds its settings.
	Broker Broker
	// Role says what this instance runs (SECKILL_ROLE, `seckill serve
	// --role`): RoleAPI the API and what admission needs, RoleWorkers the
	// consumers and background loops, RoleAll (default) both.
	Role string

	Postgres Postgres
	Redis    Redis
	Orders   Orders
	Workers  Workers
	// Events configures the sequenced event log and its subscriptions
	// (EventService.Subscribe).
	Events Events
	// Failpoints enables named failure points (SECKILL_FAILPOINTS, for
	// tests: "name=action;name=action").
	Failpoints string
	// Tracing configures OpenTelemetry from the standard OTEL_* variables.
	Tracing Tracing
}

// Events configures the event log's sequencer and subscriptions.
type Events struct {
	// SequenceInterval is the sequencer's pause after a batch that was
	// not full (SECKILL_EVENT_SEQUENCE_INTERVAL, default 20ms): how long a
	// settled event may wait for its position.
	SequenceInterval time.Duration
	// SequenceBatch is how many events one sequencing transaction takes
	// (SECKILL_EVENT_SEQUENCE_BATCH, default 500, 1..10000).
	SequenceBatch int
	// PollInterval is how often a live subscription reads the log without
	// a signal of this process's sequencer (SECKILL_EVENT_POLL_INTERVAL,
	// default 200ms): it bounds how late positions assigned by another
	// instance are seen.
	PollInterval time.Duration
	// CheckpointInterval is the longest an idle subscription goes without
	// a checkpoint (SECKILL_EVENT_CHECKPOINT_INTERVAL, default 5s).
	CheckpointInterval time.Duration
	// MaxStreams bounds the EventService streams open at once on this
	// instance (SECKILL_EVENT_STREAMS, default 64).
	MaxStreams int
	// SendTimeout bounds one send of a stream; a subscriber that does not
	// read for that long is cut off (SECKILL_EVENT_SEND_TIMEOUT, default
	// 30s) and resumes from its last position.
	SendTimeout time.Duration
	// Window is how many of the log's most recent events the API's tail
	// reader keeps in memory for the live subscriptions, read once per
	// sequencer move or poll for all of them (SECKILL_EVENT_WINDOW,
	// default 10000, 0..1000000; 0: no window, every subscription reads
	// the store itself).
	Window int
}

// Auth configures how the API verifies tokens.
type Auth struct {
	// JWKS is an http(s) URL or a file path of the identity provider's
	// JSON Web Key Set (SECKILL_AUTH_JWKS); empty: the HS256 shared-secret
	// mode. With it only RS256, ES256 and EdDSA tokens signed with a key
	// of the set (by kid) are accepted.
	JWKS string
	// JWKSRefresh is how often the set is re-read (SECKILL_AUTH_JWKS_REFRESH,
	// default 5m, 1s..24h).
	JWKSRefresh time.Duration
	// Issuer, when set, must equal a token's "iss" (SECKILL_AUTH_ISSUER).
	Issuer string
	// Audience, when set, must be among a token's "aud"
	// (SECKILL_AUTH_AUDIENCE).
	Audience string
	// MaxTokenLifetime bounds how far a token's "exp" may lie from its
	// "iat" and from now (SECKILL_AUTH_MAX_TOKEN_LIFETIME, default 24h,
	// 1m..720h).
	MaxTokenLifetime time.Duration
}

// Tracing configures the OTLP trace export (off unless an endpoint is
// set).
type Tracing struct {
	// Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
	// OTEL_EXPORTER_OTLP_ENDPOINT (OTLP over HTTP/protobuf); empty, or
	// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none, turns tracing
	// off.
	Endpoint string
	// ServiceName is OTEL_SERVICE_NAME (default seckill).
	ServiceName string
	// SampleRatio is OTEL_TRACES_SAMPLER_ARG, the share of new traces
	// sampled (default 1; a sampled parent is always followed).
	SampleRatio float64
}

// Postgres configures the database.
type Postgres struct {
	// DSN (SECKILL_PG_DSN).
	DSN Secret
	// MaxConns is the pool size (SECKILL_PG_MAX_CONNS).
	MaxConns int32
	// ConsumerBudget is the share of the pool the order-create consumer may
	// use (SECKILL_PG_CONSUMER_BUDGET, 0..1, spec 22: keep ~30% for
	// payment, queries, compensation and operations).
	ConsumerBudget float64
}

// API bounds what callers of the public API may cost.
type API struct {
	// MaxBodyBytes caps a request body on the wire and its message after
	// decompression (SECKILL_MAX_BODY_BYTES).
	MaxBodyBytes int
	// PlaceOrderConcurrency bounds PlaceOrder calls in flight in the
	// process; beyond it callers get ResourceExhausted (OVERLOADED)
	// (SECKILL_PLACE_CONCURRENCY).
	PlaceOrderConcurrency int
	// SoldOutTTL is how long a SOLD_OUT answer of the stock gate lets this
	// process answer SOLD_OUT for the SKU without reserving (one Redis
	// read instead of three scripts); a unit that comes back is visible
	// again at most this much later (SECKILL_SOLD_OUT_TTL, default 250 ms,
	// 0 disables).
	SoldOutTTL time.Duration
	// ReadRate and ReadBurst shape the per-user limit of GetOrder,
	// CancelOrder and the admin API (SECKILL_READ_RATE,
	// SECKILL_READ_BURST).
	ReadRate  float64
	ReadBurst int
	// ReadTimeout bounds reading one whole request, per HTTP/2 stream,
	// so a slow body is cut off (SECKILL_API_READ_TIMEOUT).
	ReadTimeout time.Duration
	// PayRate and PayBurst shape the per-caller limit of PayOrder
	// (SECKILL_PAY_RATE, SECKILL_PAY_BURST; 0 disables).
	PayRate  float64
	PayBurst int
	// ClientRate and ClientBurst shape the per-client-address limit of
	// every API call but health and reflection, taken before the token is
	// verified (SECKILL_CLIENT_RATE, SECKILL_CLIENT_BURST; 0 disables).
	ClientRate  float64
	ClientBurst int
	// RateKeys bounds the buckets each in-process limit table keeps
	// (SECKILL_RATE_KEYS).
	RateKeys int
	// MaxConns bounds the connections the API listener holds open at once
	// (SECKILL_API_MAX_CONNS); MaxConnsPerClient bounds those of one
	// client address, IPv6 per /64 (SECKILL_API_MAX_CONNS_PER_CLIENT).
	MaxConns          int
	MaxConnsPerClient int
}

// Redis configures the reservation store.
type Redis struct {
	Addr     string // SECKILL_REDIS_ADDR
	Password Secret // SECKILL_REDIS_PASSWORD
	// DB is the logical database the service keeps its keys in
	// (SECKILL_REDIS_DB, default 0). Tests and benchmarks lease others.
	DB        int
	Namespace string // SECKILL_REDIS_NAMESPACE
	// RateBurst and RatePerSecond shape the per-user token bucket
	// (SECKILL_RATE_BURST, SECKILL_RATE_PER_SECOND).
	RateBurst     int
	RatePerSecond float64
	// OrderViewTTL expires an order view (a cache of GetOrder: a miss
	// reads PostgreSQL) that long after its last change
	// (SECKILL_ORDER_VIEW_TTL, default 24h; 0: kept until evicted).
	OrderViewTTL time.Duration
	// RequestClaimTTL is how long a request_id stays bound to its
	// reservation, and the order lookup beside it
	// (SECKILL_REQUEST_CLAIM_TTL, default 24h).
	RequestClaimTTL time.Duration
	// ReservationRetention expires a reservation's record that long after
	// it was resolved (ordered or released) (SECKILL_RESERVATION_RETENTION,
	// default 24h; 0: kept for good). It may not be shorter than
	// RequestClaimTTL: a claim must never outlive its reservation.
	ReservationRetention time.Duration
}

// The roles of an instance (SECKILL_ROLE).
const (
	RoleAll     = "all"
	RoleAPI     = "api"
	RoleWorkers = "workers"
)

// RedisCluster reports whether SECKILL_REDIS_ADDR lists several seed
// addresses (comma-separated): the service then talks to Redis Cluster.
func (c Config) RedisCluster() bool { return strings.Contains(strings.Trim(c.Redis.Addr, ", "), ",") }

// RunsAPI reports whether the instance serves the API.
func (c Config) RunsAPI() bool { return c.Role != RoleWorkers }

// RunsWorkers reports whether the instance runs the consumers and the
// background loops.
func (c Config) RunsWorkers() bool { return c.Role != RoleAPI }

// Broker chooses the broker adapter (SECKILL_BROKER, one of the plugs
// adapters/brokers lists) and holds the settings every broker shares and
// the chosen broker's own.
type Broker struct {
	// Name is the chosen plug's name (SECKILL_BROKER; default: the
	// registry's first).
	Name string
	// Neutral holds the settings every broker shares
	// (SECKILL_SEND_TIMEOUT, SECKILL_ACK_BATCH).
	Neutral brokerplug.Neutral
	// Settings are the chosen broker's own settings, as its plug read
	// them; nil when SECKILL_BROKER names no plug (Load then fails).
	Settings brokerplug.Settings
}

// Backoff is an exponential backoff: the first wait and its bound.
type Backoff struct {
	Base, Max time.Duration
}

// Orders configures the order flow.
type Orders struct {
	// BacklogCloseRatio closes admission when the oldest unresolved
	// reservation is older than this share of its reservation TTL
	// (SECKILL_BACKLOG_CLOSE_RATIO).
	BacklogCloseRatio float64
	// ConsumerBatch is how many messages one order-create transaction
	// takes (SECKILL_CONSUMER_BATCH, 1 disables micro-batching).
	ConsumerBatch int
	// CompensationMaxAttempts and CompensationWindow bound a compensation
	// task (SECKILL_COMPENSATION_MAX_ATTEMPTS, SECKILL_COMPENSATION_WINDOW).
	CompensationMaxAttempts int
	CompensationWindow      time.Duration
}

// Workers configures the background loops.
type Workers struct {
	ScannerInterval time.Duration // SECKILL_SCANNER_INTERVAL
	ScannerBatch    int           // SECKILL_SCANNER_BATCH
	ScannerWorkers  int           // SECKILL_SCANNER_WORKERS
	ScannerLease    time.Duration // SECKILL_SCANNER_LEASE
	// ScannerIdleMax is the longest pause of the resend scanner when it
	// finds nothing (SECKILL_SCANNER_IDLE_MAX); the pause doubles from
	// ScannerInterval after each empty pass.
	ScannerIdleMax time.Duration
	// ScannerBackoff bounds the wait before a failed resend is tried
	// again: first ScannerBackoff.Base, doubling up to
	// ScannerBackoff.Max (SECKILL_SCANNER_BACKOFF_BASE, _MAX).
	ScannerBackoff Backoff
	RelayInterval  time.Duration // SECKILL_RELAY_INTERVAL
	RelayBatch     int           // SECKILL_RELAY_BATCH
	// RelayIdleMax is the longest pause of the outbox relay when the
	// outbox is drained (SECKILL_RELAY_IDLE_MAX).
	RelayIdleMax time.Duration
	// RelayWorkers is how many publishes of one relay batch run at once
	// (SECKILL_RELAY_WORKERS); rows of one message group stay on one.
	RelayWorkers int
	// RelayBackoff bounds the wait before a row whose publish failed is
	// tried again (SECKILL_RELAY_BACKOFF_BASE, _MAX).
	RelayBackoff Backoff
	// DeadLetterGaugeInterval is how often the open dead letters are
	// counted for their gauge (SECKILL_DLQ_GAUGE_INTERVAL).
	DeadLetterGaugeInterval time.Duration
	// RelayCoalesceTimeouts merges the payment-timeout messages of one
	// relay batch that share an activity and a due second into one
	// trigger (SECKILL_RELAY_COALESCE_TIMEOUTS).
	RelayCoalesceTimeouts bool
	OutboxRetention       time.Duration // SECKILL_OUTBOX_RETENTION
	// RecoverySettle is how long the rebuild of the Redis stock books
	// waits, after Redis came back as a new process, for the order-create
	// messages already in the broker (SECKILL_RECOVERY_SETTLE, default 2 s).
	RecoverySettle time.Duration
	// ReconcileInterval runs the reconciler periodically
	// (SECKILL_RECONCILE_INTERVAL, 0 disables).
	ReconcileInterval time.Duration
	// ReconcileGrace is how old an inconsistency must be before the
	// reconciler repairs it (SECKILL_RECONCILE_GRACE).
	ReconcileGrace time.Duration
	// ConsumerLimiter chooses how the business consumers' concurrency is
	// bounded (SECKILL_CONSUMER_LIMITER): LimiterFixed (default) keeps
	// each group at its configured concurrency; LimiterAdaptive lets an
	// adaptive limiter per group (spec 22.2) move it between
	// ConsumerLimitFloor and that concurrency on PostgreSQL's signals and
	// the backlog.
	ConsumerLimiter string
	// ConsumerLimitFloor is the lowest concurrency of an adaptive group
	// (SECKILL_CONSUMER_LIMIT_FLOOR, default 2, 1..the order-create
	// concurrency); a group whose concurrency is lower keeps it as floor.
	ConsumerLimitFloor int
	// ConsumerLimitTick is how often the adaptive limiters decide
	// (SECKILL_CONSUMER_LIMIT_TICK, default 1s, 100ms..1m).
	ConsumerLimitTick time.Duration
	// ConsumerGlobalBudget is the concurrent consumer transactions all
	// worker instances together may run, summed over the business groups
	// (SECKILL_CONSUMER_GLOBAL_BUDGET, default 0: each instance runs its
	// own groups' budgets in full). Under the adaptive limiter the
	// instances heartbeat into Redis and each scales its ceilings to its
	// share, min(1, budget / (live instances x its own budgets)).
	ConsumerGlobalBudget int
}

// The consumer limiters SECKILL_CONSUMER_LIMITER chooses from.
const (
	LimiterFixed    = "fixed"
	LimiterAdaptive = "adaptive"
)

// AdaptiveConsumers reports whether the business consumers run under the
// adaptive concurrency limiter (SECKILL_CONSUMER_LIMITER=adaptive).
func (c Config) AdaptiveConsumers() bool { return c.Workers.ConsumerLimiter == LimiterAdaptive }

// Load reads the configuration through lookup (os.LookupEnv in
// production) and validates it.
func Load(lookup func(string) (string, bool)) (Config, error) {
	c, _, err := read(lookup)
	return c, err
}

// Settings reads the configuration through lookup exactly as Load does and
// returns every variable it read, in reading order, with its default, the
// value in effect (secrets masked) and its meaning. The error is the one
// Load would return; the settings are returned either way, so an invalid
// configuration can still be listed.
func Settings(lookup func(string) (string, bool)) ([]Setting, error) {
	_, settings, err := read(lookup)
	return settings, err
}

// LoadBroker reads and validates only the broker block of the
// configuration (SECKILL_BROKER, the neutral settings and the chosen
// plug's own), for commands that work on the broker alone (seckill
// topology): the service's other settings are neither read nor checked.
func LoadBroker(lookup func(string) (string, bool)) (Broker, error) {
	r := reader{lookup: lookup}
	b := readBroker(&r)
	errs := r.errs
	if b.Settings == nil {
		errs = append(errs, fmt.Errorf("SECKILL_BROKER must be one of %s, not %q", strings.Join(brokers.Names(), ", "), b.Name))
	} else {
		errs = append(errs, b.Settings.Validate()...)
	}
	if err := errors.Join(errs...); err != nil {
		return Broker{}, fmt.Errorf("invalid broker configuration: %w", err)
	}
	return b, nil
}

// readBroker reads the broker block. Every plug reads its settings, so
// that every variable is listed; only the chosen broker's are kept (and
// validated by the caller).
func readBroker(r *reader) Broker {
	b := Broker{
		Name: r.str("SECKILL_BROKER", brokers.Default(),
			"the broker adapter: "+strings.Join(brokers.Names(), ", ")),
		Neutral: brokerplug.Neutral{
			SendTimeout: r.duration("SECKILL_SEND_TIMEOUT", 50*time.Millisecond,
				"bound of one synchronous send (1ms..10s)"),
			AckBatch: r.boolean("SECKILL_ACK_BATCH", true,
				"acknowledge a consumer batch together, as the broker does it best (false: one acknowledgement per message)"),
		},
	}
	for _, p := range brokers.All() {
		if ps := p.ReadSettings(plugReader{r}); p.Name() == b.Name {
			b.Settings = ps
		}
	}
	return b
}

// read is Load's reader: it parses every variable, records each one as a
// Setting and validates the result.
func read(lookup func(string) (string, bool)) (Config, []Setting, error) {
	r := reader{lookup: lookup}
	c := Config{
		HTTPAddr: r.str("SECKILL_HTTP_ADDR", "127.0.0.1:7080",
			"address of the Connect API (Connect, gRPC, gRPC-Web), gRPC health and reflection"),
		OpsAddr: r.str("SECKILL_OPS_ADDR", "127.0.0.1:7081",
			"address of /metrics, /healthz and gRPC reflection; keep it off public interfaces"),
		AuthSecret: r.secret("SECKILL_AUTH_SECRET", DevAuthSecret,
			"HS256 key that signs and verifies tokens without SECKILL_AUTH_JWKS, >= 16 bytes; the default is accepted only with SECKILL_LOCAL_STACK=true"),
		Auth: readAuth(&r),
		LocalStack: r.boolean("SECKILL_LOCAL_STACK", false,
			"true only on the local development stack (deploy/local/stack.sh up exports it): accepts the public development SECKILL_AUTH_SECRET and an empty SECKILL_OPS_TOKEN"),
		OpsToken: r.secret("SECKILL_OPS_TOKEN", "",
			"bearer token the operations listener asks of every request; required unless SECKILL_LOCAL_STACK=true (empty: none asked)"),
		OpsHosts: r.list("SECKILL_OPS_HOSTS", "",
			"comma-separated host names the operations listener accepts in the Host header besides IP literals and localhost"),
		OpsPprof: r.boolean("SECKILL_OPS_PPROF", false,
			"serve Go's runtime profiles (CPU, heap, allocations, goroutines) under /debug/pprof/ on the operations listener, behind its token"),
		API: readAPI(&r),
		LogLevel: r.level("SECKILL_LOG_LEVEL", slog.LevelInfo,
			"log level: debug, info, warn or error"),
		InstanceID: r.str("SECKILL_INSTANCE_ID", "",
			"name of this process in leases and logs (empty: <host>-<pid>)"),
		Broker: readBroker(&r),
		Role: r.str("SECKILL_ROLE", RoleAll,
			"what this instance runs: api (the API, the backlog gate and the sent marker), workers (consumers, relay, scanner, reconciler, dead letters) or all"),
		Postgres: readPostgres(&r),
		Redis:    readRedis(&r),
		Orders:   readOrders(&r),
		Workers:  readWorkers(&r),
		Events:   readEvents(&r),
		Failpoints: r.str("SECKILL_FAILPOINTS", "",
			"named failure points for tests: \"name=action;name=action\" (empty: none)"),
		Tracing: readTracing(&r),
	}
	traces := r.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "",
		"OTLP/HTTP traces URL (e.g. http://127.0.0.1:4318/v1/traces); wins over OTEL_EXPORTER_OTLP_ENDPOINT")
	base := r.str("OTEL_EXPORTER_OTLP_ENDPOINT", "",
		"OTLP/HTTP base URL (e.g. http://127.0.0.1:4318); empty with no traces URL: tracing off")
	disabled := r.boolean("OTEL_SDK_DISABLED", false, "true turns tracing off whatever the endpoint")
	exporter := r.str("OTEL_TRACES_EXPORTER", "otlp", "otlp, or none to turn tracing off")
	if !disabled && exporter != "none" {
		c.Tracing.Endpoint = traces
		if c.Tracing.Endpoint == "" {
			c.Tracing.Endpoint = base
		}
	}
	if err := errors.Join(append(r.errs, c.validate()...)...); err != nil {
		return Config{}, r.settings, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, r.settings, nil
}

// readAuth reads the token verification settings, in reading order.
func readAuth(r *reader) Auth {
	return Auth{
		JWKS: r.str("SECKILL_AUTH_JWKS", "",
			"JWKS of the identity provider: an https:// URL (http:// only on loopback) or a file path; tokens are then RS256, ES256 or EdDSA by kid and HS256 is refused (empty: HS256 with SECKILL_AUTH_SECRET)"),
		JWKSRefresh: r.duration("SECKILL_AUTH_JWKS_REFRESH", 5*time.Minute,
			"how often the JWKS is re-read (1s..24h); a kid not in the set triggers at most one early re-read per 30s"),
		Issuer: r.str("SECKILL_AUTH_ISSUER", "",
			"when set, a token's iss must equal it"),
		Audience: r.str("SECKILL_AUTH_AUDIENCE", "",
			"when set, a token's aud must contain it"),
		MaxTokenLifetime: r.duration("SECKILL_AUTH_MAX_TOKEN_LIFETIME", 24*time.Hour,
			"longest token validity: exp at most this far from iat and from now (1m..720h)"),
	}
}

// readAPI reads the API listener's bounds and rate limits, in reading order.
func readAPI(r *reader) API {
	return API{
		MaxBodyBytes: r.integer("SECKILL_MAX_BODY_BYTES", 64<<10,
			"largest request body, on the wire and decompressed (1024..16777216)"),
		PlaceOrderConcurrency: r.integer("SECKILL_PLACE_CONCURRENCY", 512,
			"PlaceOrder calls in flight per process; beyond it callers get OVERLOADED (0: no bound)"),
		SoldOutTTL: r.duration("SECKILL_SOLD_OUT_TTL", 250*time.Millisecond,
			"how long a SOLD_OUT answer is reused for the SKU without reserving (0: off)"),
		ReadRate: r.float("SECKILL_READ_RATE", 20,
			"per-user rate (per second) of GetOrder, CancelOrder and the admin API (0: no limit)"),
		ReadBurst: r.integer("SECKILL_READ_BURST", 40,
			"per-user burst of GetOrder, CancelOrder and the admin API (0: no limit)"),
		ReadTimeout: r.duration("SECKILL_API_READ_TIMEOUT", 10*time.Second,
			"longest time to read one whole request (per HTTP/2 stream), >= 100ms"),
		PayRate: r.float("SECKILL_PAY_RATE", 200,
			"per-caller rate (per second) of PayOrder (0: no limit)"),
		PayBurst: r.integer("SECKILL_PAY_BURST", 400,
			"per-caller burst of PayOrder (0: no limit)"),
		ClientRate: r.float("SECKILL_CLIENT_RATE", 2000,
			"per-client-address rate (per second) of every API call but health and reflection (0: no limit)"),
		ClientBurst: r.integer("SECKILL_CLIENT_BURST", 4000,
			"per-client-address burst of every API call but health and reflection (0: no limit)"),
		RateKeys: r.integer("SECKILL_RATE_KEYS", 262144,
			"buckets each in-process rate-limit table keeps (users, callers, addresses), 1024..16777216"),
		MaxConns: r.integer("SECKILL_API_MAX_CONNS", 4096,
			"connections the API listener holds open at once; one more is closed at accept (0: no cap)"),
		MaxConnsPerClient: r.integer("SECKILL_API_MAX_CONNS_PER_CLIENT", 512,
			"connections one client address (IPv6: its /64) holds open at once; one more is closed at accept (0: no cap)"),
	}
}

// readPostgres reads the PostgreSQL pool, in reading order.
func readPostgres(r *reader) Postgres {
	return Postgres{
		DSN: r.dsn("SECKILL_PG_DSN", "postgres://seckill:seckill@127.0.0.1:55432/seckill?sslmode=disable",
			"PostgreSQL URL (postgres://...); its password is masked here and in logs"),
		MaxConns: int32(r.integer("SECKILL_PG_MAX_CONNS", 32,
			"PostgreSQL connection pool size (2..1000)")),
		ConsumerBudget: r.float("SECKILL_PG_CONSUMER_BUDGET", 0.7,
			"share of the pool the order-create consumer may use, in (0, 1]"),
	}
}

// readRedis reads the reservation store, in reading order.
func readRedis(r *reader) Redis {
	return Redis{
		Addr: r.str("SECKILL_REDIS_ADDR", "127.0.0.1:56379",
			"Redis address (host:port) of the reservation store; several comma-separated seed addresses select Redis Cluster"),
		Password: r.secret("SECKILL_REDIS_PASSWORD", "",
			"Redis password (empty: none)"),
		DB: r.integer("SECKILL_REDIS_DB", 0,
			"Redis logical database of the service's keys"),
		Namespace: r.str("SECKILL_REDIS_NAMESPACE", "sk",
			"prefix of every Redis key (no braces, colons or spaces)"),
		RateBurst: r.integer("SECKILL_RATE_BURST", 5,
			"per-user burst of PlaceOrder (token bucket), >= 1"),
		RatePerSecond: r.float("SECKILL_RATE_PER_SECOND", 2,
			"per-user rate of PlaceOrder (tokens per second), > 0"),
		OrderViewTTL: r.duration("SECKILL_ORDER_VIEW_TTL", 24*time.Hour,
			"an order view in Redis (GetOrder's cache) expires this long after its last change; 0: never"),
		RequestClaimTTL: r.duration("SECKILL_REQUEST_CLAIM_TTL", 24*time.Hour,
			"a request_id stays bound to its reservation (a retry gets the same answer) this long, > 0"),
		ReservationRetention: r.duration("SECKILL_RESERVATION_RETENTION", 24*time.Hour,
			"a reservation's record stays in Redis this long after its order was created or it was released "+
				"(0: for good); >= SECKILL_REQUEST_CLAIM_TTL, and longer than any payment timeout"),
	}
}

// readOrders reads the order flow, in reading order.
func readOrders(r *reader) Orders {
	return Orders{
		BacklogCloseRatio: r.float("SECKILL_BACKLOG_CLOSE_RATIO", 0.5,
			"close admission when the oldest unresolved reservation is older than this share of its TTL, in (0, 1]"),
		ConsumerBatch: r.integer("SECKILL_CONSUMER_BATCH", 32,
			"messages per order-create transaction (1..32; 1: no micro-batching)"),
		CompensationMaxAttempts: r.integer("SECKILL_COMPENSATION_MAX_ATTEMPTS", 8,
			"attempts of one compensation task before it is dead-lettered"),
		CompensationWindow: r.duration("SECKILL_COMPENSATION_WINDOW", time.Hour,
			"how long a compensation task keeps being retried"),
	}
}

// readWorkers reads the background loops, in reading order.
func readWorkers(r *reader) Workers {
	return Workers{
		ScannerInterval: r.duration("SECKILL_SCANNER_INTERVAL", 200*time.Millisecond,
			"how often the resend scanner looks for reservations whose message was not confirmed"),
		ScannerBatch: r.integer("SECKILL_SCANNER_BATCH", 100,
			"reservations the resend scanner takes per pass"),
		ScannerWorkers: r.integer("SECKILL_SCANNER_WORKERS", 4,
			"concurrent resends of the resend scanner"),
		ScannerLease: r.duration("SECKILL_SCANNER_LEASE", 5*time.Second,
			"Redis lease of a reservation being resent; an expired lease is taken over (>= 1s)"),
		ScannerIdleMax: r.duration("SECKILL_SCANNER_IDLE_MAX", time.Second,
			"longest pause of the resend scanner when it finds nothing (the pause doubles from SECKILL_SCANNER_INTERVAL)"),
		ScannerBackoff: Backoff{
			Base: r.duration("SECKILL_SCANNER_BACKOFF_BASE", 200*time.Millisecond,
				"first wait before a failed resend is tried again (then doubling)"),
			Max: r.duration("SECKILL_SCANNER_BACKOFF_MAX", 3*time.Second,
				"longest wait before a failed resend is tried again"),
		},
		RelayInterval: r.duration("SECKILL_RELAY_INTERVAL", 50*time.Millisecond,
			"how often the outbox relay publishes pending events"),
		RelayBatch: r.integer("SECKILL_RELAY_BATCH", 200,
			"outbox rows the relay publishes per pass"),
		RelayIdleMax: r.duration("SECKILL_RELAY_IDLE_MAX", 250*time.Millisecond,
			"longest pause of the outbox relay when the outbox is drained (the pause doubles from SECKILL_RELAY_INTERVAL)"),
		RelayWorkers: r.integer("SECKILL_RELAY_WORKERS", 8,
			"publishes of one relay batch at once (rows of one message group stay on one), 1..256"),
		RelayBackoff: Backoff{
			Base: r.duration("SECKILL_RELAY_BACKOFF_BASE", 200*time.Millisecond,
				"first wait before an outbox row whose publish failed is tried again (then doubling)"),
			Max: r.duration("SECKILL_RELAY_BACKOFF_MAX", 5*time.Second,
				"longest wait before an outbox row whose publish failed is tried again"),
		},
		DeadLetterGaugeInterval: r.duration("SECKILL_DLQ_GAUGE_INTERVAL", 5*time.Second,
			"how often the open dead letters are counted for mq_dlq_messages and mq_dlq_oldest_age_seconds"),
		RelayCoalesceTimeouts: r.boolean("SECKILL_RELAY_COALESCE_TIMEOUTS", true,
			"send the payment-timeout checks of one relay pass that share an activity and a due second as one delay message (false: one per order)"),
		OutboxRetention: r.duration("SECKILL_OUTBOX_RETENTION", 24*time.Hour,
			"how long published outbox rows are kept before they are pruned"),
		RecoverySettle: r.duration("SECKILL_RECOVERY_SETTLE", 2*time.Second,
			"wait for in-flight order-create messages before the Redis stock books are rebuilt"),
		ReconcileInterval: r.duration("SECKILL_RECONCILE_INTERVAL", time.Minute,
			"period of the reconciler (0: off)"),
		ReconcileGrace: r.duration("SECKILL_RECONCILE_GRACE", 30*time.Second,
			"age an inconsistency must reach before the reconciler repairs it"),
		ConsumerLimiter: r.str("SECKILL_CONSUMER_LIMITER", LimiterFixed,
			"bound of the business consumers' concurrency: fixed (each group at its configured concurrency) or adaptive (a limiter per group moves it between SECKILL_CONSUMER_LIMIT_FLOOR and that concurrency on PostgreSQL's pool, latency, lock waits and the backlog)"),
		ConsumerLimitFloor: r.integer("SECKILL_CONSUMER_LIMIT_FLOOR", 2,
			"lowest concurrency of a group under the adaptive limiter, 1..the order-create concurrency (a group configured lower keeps its own)"),
		ConsumerLimitTick: r.duration("SECKILL_CONSUMER_LIMIT_TICK", time.Second,
			"how often the adaptive limiter decides, 100ms..1m"),
		ConsumerGlobalBudget: r.integer("SECKILL_CONSUMER_GLOBAL_BUDGET", 0,
			"concurrent consumer transactions all worker instances together may run under the adaptive limiter, shared per live instance through Redis (0: each instance runs its own budgets in full)"),
	}
}

// readEvents reads the event log and its subscriptions, in reading order.
func readEvents(r *reader) Events {
	return Events{
		SequenceInterval: r.duration("SECKILL_EVENT_SEQUENCE_INTERVAL", 20*time.Millisecond,
			"the event sequencer's pause after a batch that was not full (how long a settled event may wait for its position)"),
		SequenceBatch: r.integer("SECKILL_EVENT_SEQUENCE_BATCH", 500,
			"events given positions per sequencing transaction, 1..10000"),
		PollInterval: r.duration("SECKILL_EVENT_POLL_INTERVAL", 200*time.Millisecond,
			"how often a live event subscription reads the log without a signal of this instance's sequencer"),
		CheckpointInterval: r.duration("SECKILL_EVENT_CHECKPOINT_INTERVAL", 5*time.Second,
			"the longest an idle event subscription goes without a checkpoint"),
		MaxStreams: r.integer("SECKILL_EVENT_STREAMS", 64,
			"EventService streams open at once on this instance (more are refused)"),
		SendTimeout: r.duration("SECKILL_EVENT_SEND_TIMEOUT", 30*time.Second,
			"how long one send of an event stream may take before the subscriber is cut off as too slow"),
		Window: r.integer("SECKILL_EVENT_WINDOW", 10000,
			"recent events kept in memory for the live event subscriptions, read once per move for all of them (0: none, each reads the store)"),
	}
}

// readTracing reads the tracing settings (the OTLP endpoint is read after the rest, by read), in reading order.
func readTracing(r *reader) Tracing {
	return Tracing{
		ServiceName: r.str("OTEL_SERVICE_NAME", "seckill",
			"service.name of the traces"),
		SampleRatio: r.float("OTEL_TRACES_SAMPLER_ARG", 1,
			"share of new traces sampled, 0..1 (a sampled parent is always followed)"),
	}
}

// ConsumerConcurrency is the order-create consumer's ceiling of concurrent
// transactions: the pool's consumer budget, at least 1.
func (c Config) ConsumerConcurrency() int {
	n := int(float64(c.Postgres.MaxConns) * c.Postgres.ConsumerBudget)
	return max(n, 1)
}

func (c Config) validate() []error {
	var k checks
	c.validateEdge(&k)
	c.validateStores(&k)
	c.validateWork(&k)
	return k.errs
}

// checks collects the problems of a configuration.
type checks struct{ errs []error }

// check adds the problem format says unless ok.
func (k *checks) check(ok bool, format string, args ...any) {
	if !ok {
		k.errs = append(k.errs, fmt.Errorf(format, args...))
	}
}

// add adds problems found elsewhere (nil ones are left out).
func (k *checks) add(errs ...error) {
	for _, err := range errs {
		if err != nil {
			k.errs = append(k.errs, err)
		}
	}
}

// validateEdge checks the listeners, the authentication and the API's
// bounds.
func (c Config) validateEdge(k *checks) {
	k.check(c.HTTPAddr != "", "SECKILL_HTTP_ADDR is empty")
	k.check(c.OpsAddr != "", "SECKILL_OPS_ADDR is empty")
	k.check(len(c.AuthSecret) >= 16, "SECKILL_AUTH_SECRET must be at least 16 bytes")
	k.check(c.Auth.JWKS != "" || string(c.AuthSecret) != DevAuthSecret || c.LocalStack,
		"SECKILL_AUTH_SECRET is the public development default and SECKILL_LOCAL_STACK is not true: anyone could mint tokens; set a secret of your own (or SECKILL_AUTH_JWKS)")
	if err := checkJWKS(c.Auth.JWKS); err != nil {
		k.add(err)
	}
	k.check(c.Auth.JWKSRefresh >= time.Second && c.Auth.JWKSRefresh <= 24*time.Hour, "SECKILL_AUTH_JWKS_REFRESH must be 1s..24h")
	k.check(c.Auth.MaxTokenLifetime >= time.Minute && c.Auth.MaxTokenLifetime <= 720*time.Hour, "SECKILL_AUTH_MAX_TOKEN_LIFETIME must be 1m..720h")
	k.check(c.OpsToken != "" || c.LocalStack, "SECKILL_OPS_TOKEN is empty: set SECKILL_OPS_TOKEN or run on the local stack (SECKILL_LOCAL_STACK=true)")
	k.check(c.OpsToken == "" || len(c.OpsToken) >= 16, "SECKILL_OPS_TOKEN must be at least 16 bytes")
	for _, h := range c.OpsHosts {
		k.check(validHostName(h), "SECKILL_OPS_HOSTS: %q is not a host name (letters, digits, '-' and '.', no port)", h)
	}
	k.check(c.API.MaxBodyBytes >= 1<<10 && c.API.MaxBodyBytes <= 16<<20, "SECKILL_MAX_BODY_BYTES must be 1024..16777216")
	k.check(c.API.ReadTimeout >= 100*time.Millisecond, "SECKILL_API_READ_TIMEOUT must be >= 100ms")
	k.check(c.API.SoldOutTTL >= 0, "SECKILL_SOLD_OUT_TTL must be >= 0 (0: no sold-out mark)")
	k.check(c.API.PlaceOrderConcurrency >= 0, "SECKILL_PLACE_CONCURRENCY must be >= 0 (0: no bound)")
	k.check(c.API.ReadRate >= 0 && c.API.ReadBurst >= 0, "SECKILL_READ_RATE and SECKILL_READ_BURST must be >= 0 (0: no limit)")
	k.check(c.API.PayRate >= 0 && c.API.PayBurst >= 0, "SECKILL_PAY_RATE and SECKILL_PAY_BURST must be >= 0 (0: no limit)")
	k.check(c.API.ClientRate >= 0 && c.API.ClientBurst >= 0, "SECKILL_CLIENT_RATE and SECKILL_CLIENT_BURST must be >= 0 (0: no limit)")
	k.check(c.API.RateKeys >= 1<<10 && c.API.RateKeys <= 16<<20, "SECKILL_RATE_KEYS must be 1024..16777216")
	k.check(c.API.MaxConns >= 0 && c.API.MaxConnsPerClient >= 0, "SECKILL_API_MAX_CONNS and SECKILL_API_MAX_CONNS_PER_CLIENT must be >= 0 (0: no cap)")
}

// validateStores checks PostgreSQL, Redis, the broker and the role.
func (c Config) validateStores(k *checks) {
	if u, err := url.Parse(string(c.Postgres.DSN)); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		k.add(errors.New("SECKILL_PG_DSN must be a postgres:// URL"))
	}
	k.check(c.Postgres.MaxConns >= 2 && c.Postgres.MaxConns <= 1000, "SECKILL_PG_MAX_CONNS must be 2..1000")
	k.check(c.Postgres.ConsumerBudget > 0 && c.Postgres.ConsumerBudget <= 1, "SECKILL_PG_CONSUMER_BUDGET must be in (0, 1]")
	k.check(c.Redis.Addr != "", "SECKILL_REDIS_ADDR is empty")
	k.check(c.Redis.DB >= 0, "SECKILL_REDIS_DB must be >= 0")
	k.check(!c.RedisCluster() || c.Redis.DB == 0, "SECKILL_REDIS_DB must be 0 on Redis Cluster (several SECKILL_REDIS_ADDR addresses)")
	k.check(c.Redis.Namespace != "" && !strings.ContainsAny(c.Redis.Namespace, "{}: "), "SECKILL_REDIS_NAMESPACE must be non-empty without braces, colons or spaces")
	k.check(c.Redis.RateBurst >= 1, "SECKILL_RATE_BURST must be >= 1")
	k.check(c.Redis.RatePerSecond > 0, "SECKILL_RATE_PER_SECOND must be > 0")
	k.check(c.Redis.OrderViewTTL >= 0, "SECKILL_ORDER_VIEW_TTL must be >= 0")
	k.check(c.Redis.RequestClaimTTL > 0, "SECKILL_REQUEST_CLAIM_TTL must be > 0")
	k.check(c.Redis.ReservationRetention == 0 || c.Redis.ReservationRetention >= c.Redis.RequestClaimTTL,
		"SECKILL_RESERVATION_RETENTION must be 0 or >= SECKILL_REQUEST_CLAIM_TTL (a claim must never outlive its reservation)")
	if c.Broker.Settings == nil {
		k.add(fmt.Errorf("SECKILL_BROKER must be one of %s, not %q", strings.Join(brokers.Names(), ", "), c.Broker.Name))
	} else {
		k.add(c.Broker.Settings.Validate()...)
	}
	k.check(c.Role == RoleAll || c.Role == RoleAPI || c.Role == RoleWorkers, "SECKILL_ROLE must be api, workers or all")
	k.check(c.Broker.Neutral.SendTimeout >= time.Millisecond && c.Broker.Neutral.SendTimeout <= 10*time.Second, "SECKILL_SEND_TIMEOUT must be 1ms..10s")
}

// validateWork checks the order flow, the background loops and the
// event log.
func (c Config) validateWork(k *checks) {
	k.check(c.Orders.BacklogCloseRatio > 0 && c.Orders.BacklogCloseRatio <= 1, "SECKILL_BACKLOG_CLOSE_RATIO must be in (0, 1]")
	k.check(c.Orders.ConsumerBatch >= 1 && c.Orders.ConsumerBatch <= 32, "SECKILL_CONSUMER_BATCH must be 1..32 (the broker's receive cap)")
	k.check(c.Orders.CompensationMaxAttempts >= 1, "SECKILL_COMPENSATION_MAX_ATTEMPTS must be >= 1")
	k.check(c.Orders.CompensationWindow > 0, "SECKILL_COMPENSATION_WINDOW must be > 0")
	k.check(c.Workers.ScannerInterval > 0 && c.Workers.RelayInterval > 0, "worker intervals must be > 0")
	k.check(c.Workers.ScannerBatch >= 1 && c.Workers.ScannerWorkers >= 1 && c.Workers.RelayBatch >= 1, "worker batches and pools must be >= 1")
	k.check(c.Workers.ScannerLease >= time.Second, "SECKILL_SCANNER_LEASE must be >= 1s")
	k.check(c.Workers.ScannerIdleMax > 0 && c.Workers.RelayIdleMax > 0 && c.Workers.DeadLetterGaugeInterval > 0,
		"SECKILL_SCANNER_IDLE_MAX, SECKILL_RELAY_IDLE_MAX and SECKILL_DLQ_GAUGE_INTERVAL must be > 0")
	k.check(c.Workers.ScannerBackoff.Base > 0 && c.Workers.ScannerBackoff.Max >= c.Workers.ScannerBackoff.Base,
		"SECKILL_SCANNER_BACKOFF_BASE must be > 0 and SECKILL_SCANNER_BACKOFF_MAX >= it")
	k.check(c.Workers.RelayBackoff.Base > 0 && c.Workers.RelayBackoff.Max >= c.Workers.RelayBackoff.Base,
		"SECKILL_RELAY_BACKOFF_BASE must be > 0 and SECKILL_RELAY_BACKOFF_MAX >= it")
	k.check(c.Workers.RelayWorkers >= 1 && c.Workers.RelayWorkers <= 256, "SECKILL_RELAY_WORKERS must be 1..256")
	k.check(c.Workers.OutboxRetention > 0, "SECKILL_OUTBOX_RETENTION must be > 0")
	k.check(c.Workers.RecoverySettle >= 0, "SECKILL_RECOVERY_SETTLE must be >= 0")
	k.check(c.Workers.ReconcileGrace > 0, "SECKILL_RECONCILE_GRACE must be > 0")
	k.check(c.Workers.ReconcileInterval >= 0, "SECKILL_RECONCILE_INTERVAL must be >= 0")
	k.check(c.Workers.ConsumerLimiter == LimiterFixed || c.Workers.ConsumerLimiter == LimiterAdaptive,
		"SECKILL_CONSUMER_LIMITER must be fixed or adaptive, not %q", c.Workers.ConsumerLimiter)
	if c.Workers.ConsumerLimiter == LimiterAdaptive {
		// The floor and the tick mean nothing to the fixed limiter: a
		// small pool (a floor above its concurrency) stays valid there.
		k.check(c.Workers.ConsumerLimitFloor >= 1 && c.Workers.ConsumerLimitFloor <= c.ConsumerConcurrency(),
			"SECKILL_CONSUMER_LIMIT_FLOOR must be 1..%d (the order-create concurrency)", c.ConsumerConcurrency())
		k.check(c.Workers.ConsumerLimitTick >= 100*time.Millisecond && c.Workers.ConsumerLimitTick <= time.Minute,
			"SECKILL_CONSUMER_LIMIT_TICK must be 100ms..1m")
	}
	k.check(c.Workers.ConsumerGlobalBudget >= 0, "SECKILL_CONSUMER_GLOBAL_BUDGET must be >= 0 (0: not shared)")
	k.check(c.Workers.ConsumerGlobalBudget == 0 || c.Workers.ConsumerLimiter == LimiterAdaptive,
		"SECKILL_CONSUMER_GLOBAL_BUDGET needs SECKILL_CONSUMER_LIMITER=adaptive")
	k.check(c.Events.SequenceInterval > 0 && c.Events.PollInterval > 0 && c.Events.CheckpointInterval > 0,
		"SECKILL_EVENT_SEQUENCE_INTERVAL, SECKILL_EVENT_POLL_INTERVAL and SECKILL_EVENT_CHECKPOINT_INTERVAL must be > 0")
	k.check(c.Events.SequenceBatch >= 1 && c.Events.SequenceBatch <= 10000, "SECKILL_EVENT_SEQUENCE_BATCH must be 1..10000")
	k.check(c.Events.MaxStreams >= 1, "SECKILL_EVENT_STREAMS must be >= 1")
	k.check(c.Events.SendTimeout >= time.Second, "SECKILL_EVENT_SEND_TIMEOUT must be >= 1s")
	k.check(c.Events.Window >= 0 && c.Events.Window <= 1_000_000, "SECKILL_EVENT_WINDOW must be 0..1000000")
}

// LogValue renders the configuration for logs with secrets masked (the
// DSN keeps its host and database but not its password).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("http_addr", c.HTTPAddr),
		slog.String("ops_addr", c.OpsAddr),
		slog.Bool("auth_secret_is_dev_default", string(c.AuthSecret) == DevAuthSecret),
		slog.String("auth_jwks", c.Auth.JWKS),
		slog.Bool("local_stack", c.LocalStack),
		slog.Bool("ops_token_set", c.OpsToken != ""),
		slog.String("pg_dsn", maskDSN(string(c.Postgres.DSN))),
		slog.Int("pg_max_conns", int(c.Postgres.MaxConns)),
		slog.Int("consumer_concurrency", c.ConsumerConcurrency()),
		slog.String("redis_addr", c.Redis.Addr),
		slog.Int("redis_db", c.Redis.DB),
		slog.String("redis_namespace", c.Redis.Namespace),
		slog.String("broker", c.Broker.Name),
		slog.String("role", c.Role),
		slog.Any("broker_settings", c.Broker.Settings),
		slog.Duration("send_timeout", c.Broker.Neutral.SendTimeout),
		slog.Int("consumer_batch", c.Orders.ConsumerBatch),
		slog.String("consumer_limiter", c.Workers.ConsumerLimiter),
		slog.String("failpoints", c.Failpoints),
	)
}

// maskDSN hides the password of a PostgreSQL DSN, whether in the URL's
// user part or in a password query parameter; a DSN that is not a URL is
// hidden whole.
func maskDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "****"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}

// loopbackHost reports whether host names only loopback interfaces:
// 127.0.0.0/8, ::1 or localhost.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// checkJWKS validates SECKILL_AUTH_JWKS: empty, an https:// URL with a
// host, an http:// URL of a loopback host (a JWKS fetched in the clear
// from elsewhere could be swapped), or a file path (no other scheme).
func checkJWKS(v string) error {
	switch {
	case v == "":
		return nil
	case strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "http://"):
		u, err := url.Parse(v)
		if err != nil || u.Host == "" {
			return fmt.Errorf("SECKILL_AUTH_JWKS: %q is not a URL with a host", v)
		}
		if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
			return fmt.Errorf("SECKILL_AUTH_JWKS: http:// is accepted only for a loopback host; use https:// for %s", u.Host)
		}
		return nil
	case strings.Contains(v, "://"):
		return fmt.Errorf("SECKILL_AUTH_JWKS: %q: only https:// and http:// URLs or file paths", v)
	default:
		return nil
	}
}

// validHostName reports whether h is a DNS host name without a port.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Setting is one environment variable the configuration reads, as listed
// by Settings (and `seckill config`).
type Setting struct {
	// Key is the variable's name, e.g. SECKILL_HTTP_ADDR.
	Key string
	// Default is the value used when the variable is unset or empty,
	// written as it would be set (masked for a secret).
	Default string
	// Value is the value in effect: the environment's as written when it
	// sets the variable, or else Default (masked for a secret).
	Value string
	// FromEnv reports whether the environment sets the variable to a
	// non-empty value.
	FromEnv bool
	// Secret reports whether Default and Value are masked.
	Secret bool
	// Meaning says in one line what the variable controls.
	Meaning string
}

// reader parses variables, records each one as a Setting and collects
// errors.
type reader struct {
	lookup   func(string) (string, bool)
	errs     []error
	settings []Setting
}

// get looks key up and records it with its default, meaning and mask (nil:
// shown as is). It returns the environment's value and whether it is set
// and non-empty.
func (r *reader) get(key, def, meaning string, mask func(string) string) (string, bool) {
	v, ok := r.lookup(key)
	set := ok && v != ""
	s := Setting{Key: key, Default: def, Value: def, FromEnv: set, Secret: mask != nil, Meaning: meaning}
	if set {
		s.Value = v
	}
	if mask != nil {
		s.Default, s.Value = mask(s.Default), mask(s.Value)
	}
	r.settings = append(r.settings, s)
	return v, set
}

// maskSecret hides a secret whole; an empty one stays empty.
func maskSecret(s string) string {
	if s == "" {
		return ""
	}
	return "****"
}

// plugReader is the reader as a broker plug sees it
// (brokerplug.SettingReader).
type plugReader struct{ r *reader }

func (p plugReader) String(key, def, meaning string) string { return p.r.str(key, def, meaning) }
func (p plugReader) Secret(key, def, meaning string) string {
	return string(p.r.secret(key, def, meaning))
}
func (p plugReader) Int(key string, def int, meaning string) int {
	return p.r.integer(key, def, meaning)
}
func (p plugReader) Bool(key string, def bool, meaning string) bool {
	return p.r.boolean(key, def, meaning)
}
func (p plugReader) Duration(key string, def time.Duration, meaning string) time.Duration {
	return p.r.duration(key, def, meaning)
}

func (r *reader) str(key, def, meaning string) string {
	if v, ok := r.get(key, def, meaning, nil); ok {
		return v
	}
	return def
}

// secret reads a secret, masked whole in the settings.
func (r *reader) secret(key, def, meaning string) Secret {
	if v, ok := r.get(key, def, meaning, maskSecret); ok {
		return Secret(v)
	}
	return Secret(def)
}

// dsn reads a PostgreSQL DSN, whose password is masked in the settings
// (see maskDSN).
func (r *reader) dsn(key, def, meaning string) Secret {
	if v, ok := r.get(key, def, meaning, maskDSN); ok {
		return Secret(v)
	}
	return Secret(def)
}

// list reads a comma-separated list; blank items are dropped.
func (r *reader) list(key, def, meaning string) []string {
	v, ok := r.get(key, def, meaning, nil)
	if !ok {
		v = def
	}
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func (r *reader) integer(key string, def int, meaning string) int {
	v, ok := r.get(key, strconv.Itoa(def), meaning, nil)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not an integer", key, v))
	}
	return n
}

func (r *reader) boolean(key string, def bool, meaning string) bool {
	v, ok := r.get(key, strconv.FormatBool(def), meaning, nil)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a boolean (true or false)", key, v))
	}
	return b
}

func (r *reader) float(key string, def float64, meaning string) float64 {
	v, ok := r.get(key, strconv.FormatFloat(def, 'g', -1, 64), meaning, nil)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a number", key, v))
	}
	return f
}

func (r *reader) duration(key string, def time.Duration, meaning string) time.Duration {
	v, ok := r.get(key, def.String(), meaning, nil)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a duration (e.g. 50ms, 2s)", key, v))
	}
	return d
}

func (r *reader) level(key string, def slog.Level, meaning string) slog.Level {
	v, ok := r.get(key, strings.ToLower(def.String()), meaning, nil)
	if !ok {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a level (debug, info, warn, error)", key, v))
	}
	return l
}
