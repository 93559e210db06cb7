package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// benchEnv is the isolated broker namespace of one benchmark run.
type benchEnv struct {
	prefix string
	admin  *rocketmq.Admin
	topics []string
	groups []string
	log    *slog.Logger
}

// newBenchEnv creates the five topics and the consumer groups under a
// fresh prefix through the broker's admin protocol.
func newBenchEnv(ctx context.Context, log *slog.Logger) (*benchEnv, error) {
	broker := os.Getenv("SECKILL_ROCKETMQ_BROKER")
	if broker == "" {
		broker = "127.0.0.1:10911"
	}
	namesrv := os.Getenv("SECKILL_ROCKETMQ_NAMESRV")
	if namesrv == "" {
		namesrv = "127.0.0.1:9876"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &benchEnv{prefix: "BENCH" + strings.ToUpper(hex.EncodeToString(b)) + "_",
		admin: rocketmq.NewAdmin(broker, namesrv, 10*time.Second), log: log}
	for _, t := range ports.Topics {
		base, typ, err := rocketmq.TopicBaseName(t)
		if err != nil {
			return nil, err
		}
		name := e.prefix + base
		if err := e.admin.CreateTopic(ctx, rocketmq.TopicSpec{Name: name, Type: typ, Queues: 8}); err != nil {
			return nil, fmt.Errorf("create topic %s: %w", name, err)
		}
		e.topics = append(e.topics, name)
	}
	for _, g := range append(rocketmq.Groups(), rocketmq.GroupDLQReader) {
		name := e.prefix + string(g)
		if err := e.admin.CreateGroup(ctx, rocketmq.GroupSpec{Name: name, Orderly: g.Orderly(), RetryMaxTimes: 5}); err != nil {
			return nil, fmt.Errorf("create group %s: %w", name, err)
		}
		e.groups = append(e.groups, name)
	}
	return e, nil
}

// addDeadLetterTopics creates the %DLQ% topic of every group of the
// namespace (deleted with it): a whole service runs its dead-letter
// reader, which cannot start without them.
func (e *benchEnv) addDeadLetterTopics(ctx context.Context) error {
	for _, g := range e.groups {
		name := rocketmq.DLQTopic(g)
		if err := e.admin.CreateTopic(ctx, rocketmq.TopicSpec{Name: name, Queues: 1}); err != nil {
			return fmt.Errorf("create topic %s: %w", name, err)
		}
		e.topics = append(e.topics, name)
	}
	return nil
}

// scratch is an isolated copy of the local stack for one run of a
// benchmark or of the chaos command: a broker namespace (with its
// dead-letter topics), a PostgreSQL database with every migration, and a
// leased Redis logical database. Nothing of the service's data is read or
// written.
type scratch struct {
	env   *benchEnv
	dsn   string
	redis *goredis.Client
	// cfg is the configuration pointed at the scratch stack, with an
	// ephemeral API and operations address and no rate limit.
	cfg     config.Config
	closers []func()
}

// newScratch builds a scratch stack for cfg; redisPool sizes the Redis
// client (0: go-redis's default).
func newScratch(ctx context.Context, cfg config.Config, log *slog.Logger, redisPool int) (*scratch, error) {
	sc := &scratch{}
	env, err := newBenchEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	sc.closers = append(sc.closers, env.Close)
	sc.env = env
	if err := env.addDeadLetterTopics(ctx); err != nil {
		sc.Close()
		return nil, err
	}
	dsn, dropDB, err := scratchDatabase(ctx, string(cfg.Postgres.DSN), log)
	if err != nil {
		sc.Close()
		return nil, err
	}
	sc.closers = append(sc.closers, dropDB)
	sc.dsn = dsn
	rc, releaseRedis, err := scratchRedis(ctx, cfg, redisPool)
	if err != nil {
		sc.Close()
		return nil, err
	}
	sc.closers = append(sc.closers, releaseRedis)
	sc.redis = rc
	cfg.Postgres.DSN = config.Secret(dsn)
	cfg.RocketMQ.TopicPrefix = env.prefix
	cfg.Redis.DB = rc.Options().DB
	cfg.Redis.Namespace = "bench"
	cfg.HTTPAddr, cfg.OpsAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Redis.RateBurst, cfg.Redis.RatePerSecond = 1_000_000, 1_000_000
	cfg.Orders.BacklogCloseRatio = 1
	sc.cfg = cfg
	return sc, nil
}

// Close removes the scratch stack, newest part first.
func (sc *scratch) Close() {
	for i := len(sc.closers) - 1; i >= 0; i-- {
		sc.closers[i]()
	}
}

// Close deletes the namespace.
func (e *benchEnv) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, g := range e.groups {
		if err := e.admin.DeleteGroup(ctx, g); err != nil {
			e.log.Warn("delete bench group", "group", g, "error", err)
		}
	}
	for _, t := range e.topics {
		if err := e.admin.DeleteTopic(ctx, t); err != nil {
			e.log.Warn("delete bench topic", "topic", t, "error", err)
		}
	}
}

// latencies summarises a set of durations.
type latencies []time.Duration

func (l latencies) percentile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms" }

// intList parses "16,64,256".
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchActivityID returns an activity id no earlier run used.
func benchActivityID() int64 { return time.Now().UnixNano() / 1000 }
