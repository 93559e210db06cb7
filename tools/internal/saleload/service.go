package saleload

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// ServiceScratch prepares a bench that starts `seckill serve`
// subprocesses: it loads the configuration (pointed at the PostgreSQL of
// pgDSN instead when that is not empty), finds the seckill binary beside
// this one, creates the output directory out and a scratch stack whose
// Redis client has redisPool connections (benchenv.NewScratch). It
// returns the scratch stack, the service binary and the logger; the
// caller closes the scratch stack.
func ServiceScratch(ctx context.Context, out string, redisPool int, pgDSN string) (*benchenv.Scratch, string, *slog.Logger, error) {
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return nil, "", nil, err
	}
	if pgDSN != "" {
		cfg.Postgres.DSN = config.Secret(pgDSN)
	}
	exe, err := benchenv.ServiceBinary()
	if err != nil {
		return nil, "", nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, "", nil, fmt.Errorf("create the output directory: %w", err)
	}
	sc, err := benchenv.NewScratch(ctx, cfg, log, redisPool)
	if err != nil {
		return nil, "", nil, err
	}
	return sc, exe, log, nil
}

// StartService starts one `seckill serve` of binary exe (every worker and
// consumer, logging warnings and errors) on the scratch stack sc and
// waits until it is live and ready. Its log goes to service.log in dir.
// The caller stops the instance and closes its log file.
func StartService(ctx context.Context, sc *benchenv.Scratch, exe, dir string) (*benchenv.Instance, error) {
	cfg := sc.Config
	in, err := benchenv.NewInstance("service", exe, dir,
		"SECKILL_PG_DSN="+sc.DSN, "SECKILL_REDIS_ADDR="+cfg.Redis.Addr, "SECKILL_REDIS_DB="+strconv.Itoa(cfg.Redis.DB),
		"SECKILL_REDIS_NAMESPACE="+cfg.Redis.Namespace, "SECKILL_INSTANCE_ID=sale-"+sc.Env.Prefix(),
		"SECKILL_FAILPOINTS=", "SECKILL_LOG_LEVEL=warn")
	if err != nil {
		return nil, err
	}
	in.Env = append(in.Env, sc.Env.ServiceEnv()...)
	in.CleanEnv = in.Env
	if err := in.Start(); err != nil {
		_ = in.LogFile.Close()
		return nil, err
	}
	if err := in.WaitLive(ctx); err != nil {
		in.Stop()
		return nil, err
	}
	if err := salekit.WaitReady(ctx, "http://"+in.Ops+"/readyz", 60*time.Second); err != nil {
		in.Stop()
		return nil, fmt.Errorf("service: %w (log: %s)", err, in.LogFile.Name())
	}
	return in, nil
}
