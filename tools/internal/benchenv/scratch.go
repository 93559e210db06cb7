package benchenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/testkit/redisdb"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// Scratch is an isolated copy of the local stack for one run of a
// benchmark or of the chaos command: a broker namespace on the broker
// SECKILL_BROKER chose (with its dead-letter resources), a PostgreSQL database with every migration, and a
// leased Redis logical database. Nothing of the service's data is read or
// written.
type Scratch struct {
	Env   *Namespace
	DSN   string
	Redis *goredis.Client
	// Config is the configuration pointed at the scratch stack, with an
	// ephemeral API and operations address and no rate limit.
	Config  config.Config
	closers []func()
}

// NewScratch builds a scratch stack for cfg; redisPool sizes the Redis
// client (0: go-redis's default).
func NewScratch(ctx context.Context, cfg config.Config, log *slog.Logger, redisPool int) (*Scratch, error) {
	sc := &Scratch{}
	env, err := NewNamespace(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	sc.closers = append(sc.closers, env.Close)
	sc.Env = env
	dsn, dropDB, err := ScratchDatabase(ctx, string(cfg.Postgres.DSN), log)
	if err != nil {
		sc.Close()
		return nil, err
	}
	sc.closers = append(sc.closers, dropDB)
	sc.DSN = dsn
	rc, releaseRedis, err := ScratchRedis(ctx, cfg, redisPool)
	if err != nil {
		sc.Close()
		return nil, err
	}
	sc.closers = append(sc.closers, releaseRedis)
	sc.Redis = rc
	cfg.Postgres.DSN = config.Secret(dsn)
	env.Configure(&cfg)
	cfg.Redis.DB = rc.Options().DB
	cfg.Redis.Namespace = "bench"
	cfg.HTTPAddr, cfg.OpsAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Redis.RateBurst, cfg.Redis.RatePerSecond = 1_000_000, 1_000_000
	cfg.Orders.BacklogCloseRatio = 1
	sc.Config = cfg
	return sc, nil
}

// Close removes the scratch stack, newest part first.
func (sc *Scratch) Close() {
	for i := len(sc.closers) - 1; i >= 0; i-- {
		sc.closers[i]()
	}
}

// ScratchDatabase creates an empty database next to the one dsn names,
// migrates it and returns its DSN and a function that drops it, so that
// every run measures the same table sizes.
func ScratchDatabase(ctx context.Context, dsn string, log *slog.Logger) (string, func(), error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("parse SECKILL_PG_DSN: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "seckill_bench_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create scratch database (the role needs CREATEDB): %w", err)
	}
	drop := func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			log.Warn("drop scratch database", "database", name, "error", err)
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			log.Warn("drop scratch database", "database", name, "error", err)
		}
	}
	u.Path = "/" + name
	m, err := postgres.NewMigrator(u.String(), log)
	if err != nil {
		drop()
		return "", nil, err
	}
	defer func() { _ = m.Close() }()
	if _, err := m.Up(ctx); err != nil {
		drop()
		return "", nil, err
	}
	return u.String(), drop, nil
}

// Checkpoint runs CHECKPOINT on the database dsn names, so that a
// measurement does not pay for a checkpoint caused by earlier work. It
// needs a superuser or the pg_checkpoint role; the benches only warn when
// it fails.
func Checkpoint(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// ScratchRedis leases a Redis logical database of its own for a
// benchmark (never the service's, SECKILL_REDIS_DB) and returns a client
// bound to it with poolSize connections; release empties and returns it.
func ScratchRedis(ctx context.Context, cfg config.Config, poolSize int) (*goredis.Client, func(), error) {
	l, err := redisdb.Claim(ctx, goredis.Options{Addr: cfg.Redis.Addr, Password: string(cfg.Redis.Password), PoolSize: poolSize}, 0)
	if err != nil {
		return nil, nil, err
	}
	return l.Client, func() { _ = l.Release(context.WithoutCancel(ctx)) }, nil
}
