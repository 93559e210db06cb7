package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/ports"
)

// DefaultStockBuckets is the number of sku_stock rows a new activity's
// final stock is spread over when Config.StockBuckets is 0. It comes from
// the measurement in README.md (BenchmarkStockRow).
const DefaultStockBuckets = 8

// maxStockBuckets is the schema's upper bound (activities.stock_buckets).
const maxStockBuckets = 64

// Config configures Open. Only DSN is required.
type Config struct {
	// DSN is a libpq connection string or URL.
	DSN string
	// MaxConns caps the pool (default 10). The consumers' concurrency is
	// sized from it: no more transactions run than connections exist.
	MaxConns int32
	// MinConns is the number of connections kept open (default 0).
	MinConns int32
	// MaxConnLifetime closes connections older than this (default 30m).
	MaxConnLifetime time.Duration
	// MaxConnIdleTime closes connections idle for this long (default 5m).
	MaxConnIdleTime time.Duration
	// StatementTimeout, when > 0, is the sessions' statement_timeout: a
	// statement running longer fails with SQLSTATE 57014 (transient).
	StatementTimeout time.Duration
	// ApplicationName is reported in pg_stat_activity (default "seckill").
	ApplicationName string
	// StockBuckets is the number of rows a new activity's final stock is
	// spread over, 1..64 (default DefaultStockBuckets; 1 is a single hot
	// row). It is stored per activity and never changes afterwards.
	StockBuckets int
	// Tracer records a span per transaction, commit included (see package
	// tracing); nil records none.
	Tracer trace.TracerProvider
	// Clock, when set, is the source of every "now" the store uses: each
	// transaction reads it once when it begins, and that instant is its
	// Tx.Now and the value of every timestamp the adapter's SQL would
	// otherwise take from the database's now() (outbox availability and
	// publication, inbox and outcome updates, dead-letter sightings, audit
	// and creation times). It exists for deterministic tests that advance a
	// fake clock (payment timeouts, reservation TTLs, relay backoff) and
	// must not be set in production: nil, the default, keeps the
	// database's clock, with no extra statement or round trip.
	Clock ports.Clock
}

// Store is the PostgreSQL adapter on a connection pool. It implements
// ports.UnitOfWork and ports.OrderQueries and is safe for concurrent use.
// Close it when done.
type Store struct {
	pool         *pgxpool.Pool
	log          *slog.Logger
	metrics      *metrics
	stockBuckets int
	tracer       trace.Tracer // nil: tracing off
	clock        ports.Clock  // nil: the database's now() (see Config.Clock)
}

var (
	_ ports.UnitOfWork   = (*Store)(nil)
	_ ports.OrderQueries = (*Store)(nil)
)

// Open connects a pool to cfg.DSN, checks that the server answers and
// registers the adapter's metrics on reg (nil registers nothing). It does
// not migrate the schema (see Migrator).
func Open(ctx context.Context, cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	buckets := cfg.StockBuckets
	if buckets == 0 {
		buckets = DefaultStockBuckets
	}
	if buckets < 1 || buckets > maxStockBuckets {
		return nil, fmt.Errorf("postgres: stock buckets %d outside 1..%d", buckets, maxStockBuckets)
	}
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: create pool: %w", err)
	}
	s := &Store{pool: pool, log: logger, metrics: newMetrics(), stockBuckets: buckets, clock: cfg.Clock}
	if cfg.Tracer != nil {
		s.tracer = cfg.Tracer.Tracer("github.com/seckill-dev/seckill/adapters/postgres")
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, s.classify("ping", err)
	}
	if err := s.metrics.register(reg, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func poolConfig(cfg Config) (*pgxpool.Config, error) {
	if cfg.DSN == "" {
		return nil, errors.New("postgres: empty DSN")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse DSN: %w", err)
	}
	pcfg.MaxConns = 10
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	pcfg.MinConns = max(cfg.MinConns, 0)
	pcfg.MaxConnLifetime = 30 * time.Minute
	if cfg.MaxConnLifetime > 0 {
		pcfg.MaxConnLifetime = cfg.MaxConnLifetime
	}
	pcfg.MaxConnIdleTime = 5 * time.Minute
	if cfg.MaxConnIdleTime > 0 {
		pcfg.MaxConnIdleTime = cfg.MaxConnIdleTime
	}
	params := pcfg.ConnConfig.RuntimeParams
	params["application_name"] = "seckill"
	if cfg.ApplicationName != "" {
		params["application_name"] = cfg.ApplicationName
	}
	if cfg.StatementTimeout > 0 {
		params["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	return pcfg, nil
}

// Close closes the pool, waiting for acquired connections to be released.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.classify("ping", s.pool.Ping(ctx))
}

// acquire takes a pooled connection, observing the wait.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	start := time.Now()
	conn, err := s.pool.Acquire(ctx)
	s.metrics.poolWait.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, s.classify("acquire connection", err)
	}
	return conn, nil
}

// withConn runs fn on a pooled connection, released afterwards.
func (s *Store) withConn(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	conn, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return fn(conn.Conn())
}
