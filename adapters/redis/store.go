package redis

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/ports"
)

// Defaults of Config.
const (
	// DefaultNamespace is the key prefix when Config.Namespace is empty.
	DefaultNamespace = "sk"
	// DefaultRateCapacity is the token bucket size when
	// Config.RateLimit.Capacity is 0.
	DefaultRateCapacity = 5
	// DefaultRefillPerSecond is the token refill rate when
	// Config.RateLimit.RefillPerSecond is 0.
	DefaultRefillPerSecond = 1.0
	// DefaultRequestClaimTTL is the request claim lifetime when
	// Config.RequestClaimTTL is 0.
	DefaultRequestClaimTTL = 24 * time.Hour
	// DefaultSlotsCacheTTL is the slots cache lifetime when
	// Config.SlotsCacheTTL is 0.
	DefaultSlotsCacheTTL = time.Second
	// DefaultScrapeTimeout bounds a metrics scrape when
	// Config.ScrapeTimeout is 0.
	DefaultScrapeTimeout = 2 * time.Second
)

// RateLimit configures the per-user token bucket of ClaimRequest.
type RateLimit struct {
	// Capacity is the bucket size (the burst a user may send). 0 means
	// DefaultRateCapacity; a negative value disables rate limiting.
	Capacity int
	// RefillPerSecond is the number of tokens added per second. 0 means
	// DefaultRefillPerSecond.
	RefillPerSecond float64
}

// Config configures a Store. The zero value is usable: every zero field
// takes its default.
type Config struct {
	// Namespace prefixes every key ("<ns>:..."). Default "sk". It may not
	// contain braces or spaces.
	Namespace string
	// RateLimit is the per-user token bucket of ClaimRequest.
	RateLimit RateLimit
	// RequestClaimTTL is the lifetime of a request claim and of its order
	// lookup key when ClaimRequest is called with ttl <= 0. Default 24h.
	RequestClaimTTL time.Duration
	// OrderViewTTL, when > 0, expires an order view that long after its
	// last applied update. Default: views never expire.
	OrderViewTTL time.Duration
	// ReservationRetention, when > 0, expires a reservation's hash that
	// long after it was resolved (ORDERED by MarkOrdered, or RELEASED):
	// past it, Get, Release and MarkOrdered treat the reservation as
	// unknown. An order canceled after its reservation expired gets its
	// compensation quarantined (RESERVATION_MISSING) and its unit is not
	// given back to Redis, so it must be longer than any payment timeout
	// plus the longest a timeout message may be delayed. Default: kept for
	// good.
	ReservationRetention time.Duration
	// SlotsCacheTTL is how long ClaimDue and Stats reuse the set of seeded
	// activity SKUs before reading it again. Default 1s.
	SlotsCacheTTL time.Duration
	// ScrapeTimeout bounds the Redis reads behind one metrics scrape.
	// Default 2s.
	ScrapeTimeout time.Duration
	// Guard, when set, is the guard installed as the client's OnConnect
	// hook; Reserve then answers ports.ErrStockPaused for an activity SKU
	// Redis lost while a recovery is pending (on a cluster: while the
	// master serving the SKU's hash slot is pending).
	Guard *Guard
	// Clock, when set, is the token bucket's and the consumer heartbeats'
	// clock (passed to the scripts in milliseconds) and the clock of the
	// metrics' ages. When nil the scripts use Redis' TIME and the metrics
	// time.Now.
	Clock func() time.Time
	// Tracer records a span per script call (see package tracing); nil
	// records none.
	Tracer trace.TracerProvider
}

func (c Config) withDefaults() (Config, error) {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if strings.ContainsAny(c.Namespace, "{} \t\r\n") {
		return c, fmt.Errorf("redis: namespace %q may not contain braces or spaces", c.Namespace)
	}
	if c.RateLimit.Capacity == 0 {
		c.RateLimit.Capacity = DefaultRateCapacity
	}
	if c.RateLimit.RefillPerSecond == 0 {
		c.RateLimit.RefillPerSecond = DefaultRefillPerSecond
	}
	if c.RateLimit.RefillPerSecond < 0 {
		return c, errors.New("redis: RateLimit.RefillPerSecond must be >= 0")
	}
	if c.RequestClaimTTL <= 0 {
		c.RequestClaimTTL = DefaultRequestClaimTTL
	}
	if c.SlotsCacheTTL <= 0 {
		c.SlotsCacheTTL = DefaultSlotsCacheTTL
	}
	if c.ScrapeTimeout <= 0 {
		c.ScrapeTimeout = DefaultScrapeTimeout
	}
	return c, nil
}

// Store is the Redis adapter. It implements ports.Admission,
// ports.Reservations and ports.Backlog, and hands out the ports.OrderViews
// implementation (Store.OrderViews). It is safe for concurrent use. It starts no goroutine; Close is not needed (the caller
// owns and closes the client).
type Store struct {
	client  goredis.UniversalClient
	cfg     Config
	keys    keys
	scripts scripts
	metrics *metrics
	logger  *slog.Logger
	tracer  trace.Tracer // nil: tracing off

	// callPrefix and calls make the call tokens of callToken.
	callPrefix string
	calls      atomic.Uint64

	slotsMu    sync.Mutex
	slotsCache []string
	slotsAt    time.Time
	rotation   atomic.Uint64

	// laneCounts caches each activity SKU's number of stock lanes (fixed
	// at creation), keyed by {activity, sku}.
	laneCounts sync.Map
	// laneIDCache caches laneID by {activity, sku, lane}.
	laneIDCache sync.Map
}

// Interface checks.
var (
	_ ports.Admission    = (*Store)(nil)
	_ ports.Reservations = (*Store)(nil)
	_ ports.Backlog      = (*Store)(nil)
)

// New returns a Store on client. It registers the adapter's metrics with
// reg (reservation_mq_pending, reservation_mq_pending_oldest_age_seconds,
// both computed from Stats when scraped, and the histogram
// redis_script_duration_seconds{script}); reg may be nil to register
// nothing. logger nil means slog.Default().
func New(client goredis.UniversalClient, cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: nil client")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	sc, err := loadScripts()
	if err != nil {
		return nil, err
	}
	s := &Store{
		client:  client,
		cfg:     cfg,
		keys:    keys{ns: cfg.Namespace},
		scripts: sc,
		logger:  logger.With("component", "redis"),
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.callPrefix = hex.EncodeToString(b[:]) + "."
	if cfg.Tracer != nil {
		s.tracer = cfg.Tracer.Tracer("github.com/seckill-dev/seckill/adapters/redis")
	}
	s.metrics = newMetrics(s)
	if reg != nil {
		if err := s.metrics.register(reg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// callToken returns a token unique to one script call (a random prefix
// per Store and a counter), which a script stores with its effect so that
// the same call run again after its reply was lost recognises its own
// effect (doc.go, "Retries").
func (s *Store) callToken() string {
	return s.callPrefix + strconv.FormatUint(s.calls.Add(1), 10)
}

// Namespace returns the key namespace in use.
func (s *Store) Namespace() string { return s.cfg.Namespace }

func (s *Store) now() time.Time {
	if s.cfg.Clock != nil {
		return s.cfg.Clock()
	}
	return time.Now()
}
