// Package config loads the service's configuration from environment
// variables into one typed struct, with defaults that fit the local stack
// started by deploy/local/stack.sh, and validates it at start. Secrets are
// masked whenever the configuration is logged.
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
	// AuthSecret signs and verifies HS256 tokens (SECKILL_AUTH_SECRET).
	// The development default is accepted only while the API listens on
	// a loopback address.
	AuthSecret Secret
	// API bounds what callers may cost.
	API API
	// LogLevel is debug, info, warn or error (SECKILL_LOG_LEVEL).
	LogLevel slog.Level
	// InstanceID names this process in leases and logs
	// (SECKILL_INSTANCE_ID, default host-pid).
	InstanceID string

	Postgres Postgres
	Redis    Redis
	RocketMQ RocketMQ
	Orders   Orders
	Workers  Workers
	// Failpoints enables named failure points (SECKILL_FAILPOINTS, for
	// tests: "name=action;name=action").
	Failpoints string
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
}

// RocketMQ configures the broker clients.
type RocketMQ struct {
	Endpoint    string // SECKILL_ROCKETMQ_ENDPOINT (proxy gRPC)
	TopicPrefix string // SECKILL_TOPIC_PREFIX
	AccessKey   string // SECKILL_ROCKETMQ_ACCESS_KEY
	SecretKey   Secret // SECKILL_ROCKETMQ_SECRET_KEY
	// SendTimeout bounds the synchronous send (SECKILL_SEND_TIMEOUT).
	SendTimeout time.Duration
	// SendBatch is how many concurrent plain messages of one topic one
	// SendMessage call may carry (SECKILL_SEND_BATCH, default 32; 0 or 1:
	// one per call, through the client library).
	SendBatch int
	// AckBatch acknowledges the messages of a consumer batch with one
	// AckMessage call per topic (SECKILL_ACK_BATCH, default true; false:
	// one call per message, through the client library).
	AckBatch bool
	// ClientLogDir receives the Go client's own log files
	// (SECKILL_ROCKETMQ_LOG_DIR).
	ClientLogDir string
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
	RelayInterval   time.Duration // SECKILL_RELAY_INTERVAL
	RelayBatch      int           // SECKILL_RELAY_BATCH
	OutboxRetention time.Duration // SECKILL_OUTBOX_RETENTION
	// InvisibleDuration is how long a received message stays hidden from
	// other consumers (SECKILL_INVISIBLE_DURATION, default 10 s, the
	// proxy's default minimum). It bounds how long the messages a crashed
	// consumer held wait before another consumer gets them; a running
	// handler's messages are renewed every half of it.
	InvisibleDuration time.Duration
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
}

// Load reads the configuration through lookup (os.LookupEnv in
// production) and validates it.
func Load(lookup func(string) (string, bool)) (Config, error) {
	r := reader{lookup: lookup}
	c := Config{
		HTTPAddr:   r.str("SECKILL_HTTP_ADDR", "127.0.0.1:7080"),
		OpsAddr:    r.str("SECKILL_OPS_ADDR", "127.0.0.1:7081"),
		AuthSecret: Secret(r.str("SECKILL_AUTH_SECRET", DevAuthSecret)),
		API: API{
			MaxBodyBytes:          r.integer("SECKILL_MAX_BODY_BYTES", 64<<10),
			PlaceOrderConcurrency: r.integer("SECKILL_PLACE_CONCURRENCY", 512),
			SoldOutTTL:            r.duration("SECKILL_SOLD_OUT_TTL", 250*time.Millisecond),
			ReadRate:              r.float("SECKILL_READ_RATE", 20),
			ReadBurst:             r.integer("SECKILL_READ_BURST", 40),
			ReadTimeout:           r.duration("SECKILL_API_READ_TIMEOUT", 10*time.Second),
		},
		LogLevel:   r.level("SECKILL_LOG_LEVEL", slog.LevelInfo),
		InstanceID: r.str("SECKILL_INSTANCE_ID", ""),
		Postgres: Postgres{
			DSN:            Secret(r.str("SECKILL_PG_DSN", "postgres://seckill:seckill@127.0.0.1:55432/seckill?sslmode=disable")),
			MaxConns:       int32(r.integer("SECKILL_PG_MAX_CONNS", 32)),
			ConsumerBudget: r.float("SECKILL_PG_CONSUMER_BUDGET", 0.7),
		},
		Redis: Redis{
			Addr:          r.str("SECKILL_REDIS_ADDR", "127.0.0.1:56379"),
			Password:      Secret(r.str("SECKILL_REDIS_PASSWORD", "")),
			DB:            r.integer("SECKILL_REDIS_DB", 0),
			Namespace:     r.str("SECKILL_REDIS_NAMESPACE", "sk"),
			RateBurst:     r.integer("SECKILL_RATE_BURST", 5),
			RatePerSecond: r.float("SECKILL_RATE_PER_SECOND", 2),
		},
		RocketMQ: RocketMQ{
			Endpoint:     r.str("SECKILL_ROCKETMQ_ENDPOINT", "127.0.0.1:8081"),
			TopicPrefix:  r.str("SECKILL_TOPIC_PREFIX", ""),
			AccessKey:    r.str("SECKILL_ROCKETMQ_ACCESS_KEY", "seckill"),
			SecretKey:    Secret(r.str("SECKILL_ROCKETMQ_SECRET_KEY", "seckill")),
			SendTimeout:  r.duration("SECKILL_SEND_TIMEOUT", 50*time.Millisecond),
			SendBatch:    r.integer("SECKILL_SEND_BATCH", 32),
			AckBatch:     r.boolean("SECKILL_ACK_BATCH", true),
			ClientLogDir: r.str("SECKILL_ROCKETMQ_LOG_DIR", ""),
		},
		Orders: Orders{
			BacklogCloseRatio:       r.float("SECKILL_BACKLOG_CLOSE_RATIO", 0.5),
			ConsumerBatch:           r.integer("SECKILL_CONSUMER_BATCH", 32),
			CompensationMaxAttempts: r.integer("SECKILL_COMPENSATION_MAX_ATTEMPTS", 8),
			CompensationWindow:      r.duration("SECKILL_COMPENSATION_WINDOW", time.Hour),
		},
		Workers: Workers{
			ScannerInterval:   r.duration("SECKILL_SCANNER_INTERVAL", 200*time.Millisecond),
			ScannerBatch:      r.integer("SECKILL_SCANNER_BATCH", 100),
			ScannerWorkers:    r.integer("SECKILL_SCANNER_WORKERS", 4),
			ScannerLease:      r.duration("SECKILL_SCANNER_LEASE", 5*time.Second),
			RelayInterval:     r.duration("SECKILL_RELAY_INTERVAL", 50*time.Millisecond),
			RelayBatch:        r.integer("SECKILL_RELAY_BATCH", 200),
			OutboxRetention:   r.duration("SECKILL_OUTBOX_RETENTION", 24*time.Hour),
			InvisibleDuration: r.duration("SECKILL_INVISIBLE_DURATION", 10*time.Second),
			RecoverySettle:    r.duration("SECKILL_RECOVERY_SETTLE", 2*time.Second),
			ReconcileInterval: r.duration("SECKILL_RECONCILE_INTERVAL", time.Minute),
			ReconcileGrace:    r.duration("SECKILL_RECONCILE_GRACE", 30*time.Second),
		},
		Failpoints: r.str("SECKILL_FAILPOINTS", ""),
	}
	if err := errors.Join(append(r.errs, c.validate()...)...); err != nil {
		return Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}

// ConsumerConcurrency is the order-create consumer's ceiling of concurrent
// transactions: the pool's consumer budget, at least 1.
func (c Config) ConsumerConcurrency() int {
	n := int(float64(c.Postgres.MaxConns) * c.Postgres.ConsumerBudget)
	return max(n, 1)
}

func (c Config) validate() []error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.HTTPAddr != "", "SECKILL_HTTP_ADDR is empty")
	check(c.OpsAddr != "", "SECKILL_OPS_ADDR is empty")
	check(len(c.AuthSecret) >= 16, "SECKILL_AUTH_SECRET must be at least 16 bytes")
	check(string(c.AuthSecret) != DevAuthSecret || loopback(c.HTTPAddr),
		"SECKILL_AUTH_SECRET is the public development default while SECKILL_HTTP_ADDR (%s) is not a loopback address: anyone could mint tokens; set a secret of your own", c.HTTPAddr)
	check(c.API.MaxBodyBytes >= 1<<10 && c.API.MaxBodyBytes <= 16<<20, "SECKILL_MAX_BODY_BYTES must be 1024..16777216")
	check(c.API.ReadTimeout >= 100*time.Millisecond, "SECKILL_API_READ_TIMEOUT must be >= 100ms")
	check(c.API.SoldOutTTL >= 0, "SECKILL_SOLD_OUT_TTL must be >= 0 (0: no sold-out mark)")
	check(c.API.PlaceOrderConcurrency >= 0, "SECKILL_PLACE_CONCURRENCY must be >= 0 (0: no bound)")
	check(c.API.ReadRate >= 0 && c.API.ReadBurst >= 0, "SECKILL_READ_RATE and SECKILL_READ_BURST must be >= 0 (0: no limit)")
	if u, err := url.Parse(string(c.Postgres.DSN)); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		errs = append(errs, errors.New("SECKILL_PG_DSN must be a postgres:// URL"))
	}
	check(c.Postgres.MaxConns >= 2 && c.Postgres.MaxConns <= 1000, "SECKILL_PG_MAX_CONNS must be 2..1000")
	check(c.Postgres.ConsumerBudget > 0 && c.Postgres.ConsumerBudget <= 1, "SECKILL_PG_CONSUMER_BUDGET must be in (0, 1]")
	check(c.Redis.Addr != "", "SECKILL_REDIS_ADDR is empty")
	check(c.Redis.DB >= 0, "SECKILL_REDIS_DB must be >= 0")
	check(c.Redis.Namespace != "" && !strings.ContainsAny(c.Redis.Namespace, "{}: "), "SECKILL_REDIS_NAMESPACE must be non-empty without braces, colons or spaces")
	check(c.Redis.RateBurst >= 1, "SECKILL_RATE_BURST must be >= 1")
	check(c.Redis.RatePerSecond > 0, "SECKILL_RATE_PER_SECOND must be > 0")
	check(c.RocketMQ.Endpoint != "", "SECKILL_ROCKETMQ_ENDPOINT is empty")
	check(c.RocketMQ.SendBatch >= 0 && c.RocketMQ.SendBatch <= 1024, "SECKILL_SEND_BATCH must be 0..1024")
	check(c.RocketMQ.SendTimeout >= time.Millisecond && c.RocketMQ.SendTimeout <= 10*time.Second, "SECKILL_SEND_TIMEOUT must be 1ms..10s")
	check(c.Orders.BacklogCloseRatio > 0 && c.Orders.BacklogCloseRatio <= 1, "SECKILL_BACKLOG_CLOSE_RATIO must be in (0, 1]")
	check(c.Orders.ConsumerBatch >= 1 && c.Orders.ConsumerBatch <= 32, "SECKILL_CONSUMER_BATCH must be 1..32 (the broker's receive cap)")
	check(c.Orders.CompensationMaxAttempts >= 1, "SECKILL_COMPENSATION_MAX_ATTEMPTS must be >= 1")
	check(c.Orders.CompensationWindow > 0, "SECKILL_COMPENSATION_WINDOW must be > 0")
	check(c.Workers.ScannerInterval > 0 && c.Workers.RelayInterval > 0, "worker intervals must be > 0")
	check(c.Workers.ScannerBatch >= 1 && c.Workers.ScannerWorkers >= 1 && c.Workers.RelayBatch >= 1, "worker batches and pools must be >= 1")
	check(c.Workers.ScannerLease >= time.Second, "SECKILL_SCANNER_LEASE must be >= 1s")
	check(c.Workers.OutboxRetention > 0, "SECKILL_OUTBOX_RETENTION must be > 0")
	check(c.Workers.RecoverySettle >= 0, "SECKILL_RECOVERY_SETTLE must be >= 0")
	check(c.Workers.InvisibleDuration >= time.Second, "SECKILL_INVISIBLE_DURATION must be >= 1s (and >= the proxy's minInvisibleTimeMillsForRecv, 10s by default)")
	check(c.Workers.ReconcileGrace > 0, "SECKILL_RECONCILE_GRACE must be > 0")
	check(c.Workers.ReconcileInterval >= 0, "SECKILL_RECONCILE_INTERVAL must be >= 0")
	return errs
}

// LogValue renders the configuration for logs with secrets masked (the
// DSN keeps its host and database but not its password).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("http_addr", c.HTTPAddr),
		slog.String("ops_addr", c.OpsAddr),
		slog.Bool("auth_secret_is_dev_default", string(c.AuthSecret) == DevAuthSecret),
		slog.String("pg_dsn", maskDSN(string(c.Postgres.DSN))),
		slog.Int("pg_max_conns", int(c.Postgres.MaxConns)),
		slog.Int("consumer_concurrency", c.ConsumerConcurrency()),
		slog.String("redis_addr", c.Redis.Addr),
		slog.Int("redis_db", c.Redis.DB),
		slog.String("redis_namespace", c.Redis.Namespace),
		slog.String("rocketmq_endpoint", c.RocketMQ.Endpoint),
		slog.String("topic_prefix", c.RocketMQ.TopicPrefix),
		slog.Duration("send_timeout", c.RocketMQ.SendTimeout),
		slog.Int("consumer_batch", c.Orders.ConsumerBatch),
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

// loopback reports whether addr (host:port) names only loopback
// interfaces: 127.0.0.0/8, ::1 or localhost. An empty host (all
// interfaces) is not loopback.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// reader parses variables and collects errors.
type reader struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (r *reader) str(key, def string) string {
	if v, ok := r.lookup(key); ok && v != "" {
		return v
	}
	return def
}

func (r *reader) integer(key string, def int) int {
	v, ok := r.lookup(key)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not an integer", key, v))
	}
	return n
}

func (r *reader) boolean(key string, def bool) bool {
	v, ok := r.lookup(key)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a boolean (true or false)", key, v))
	}
	return b
}

func (r *reader) float(key string, def float64) float64 {
	v, ok := r.lookup(key)
	if !ok || v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a number", key, v))
	}
	return f
}

func (r *reader) duration(key string, def time.Duration) time.Duration {
	v, ok := r.lookup(key)
	if !ok || v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a duration (e.g. 50ms, 2s)", key, v))
	}
	return d
}

func (r *reader) level(key string, def slog.Level) slog.Level {
	v, ok := r.lookup(key)
	if !ok || v == "" {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %q is not a level (debug, info, warn, error)", key, v))
	}
	return l
}
