package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/bootstrap/config"

	"github.com/seckill-dev/seckill/tools/internal/procstat"
)

// scratch is an isolated copy of the local stack for one run of a
// benchmark or of the chaos command: a broker namespace on the broker
// SECKILL_BROKER chose (with its dead-letter resources), a PostgreSQL database with every migration, and a
// leased Redis logical database. Nothing of the service's data is read or
// written.
type scratch struct {
	env   *benchNamespace
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
	env, err := newBenchEnv(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	sc.closers = append(sc.closers, env.Close)
	sc.env = env
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
	env.Configure(&cfg)
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

// meteredProc is a process whose CPU a cpuMeter reads: pid, with its
// children when tree (PostgreSQL's backends).
type meteredProc struct {
	pid  int
	tree bool
}

// stackMeteredProc is the local stack's process component (its pid file under
// $SECKILL_STACK_DIR/run); tree as in meteredProc.
func stackMeteredProc(component string, tree bool) (meteredProc, error) {
	pid, err := stackPID(component)
	return meteredProc{pid: pid, tree: tree}, err
}

// selfProc is this process.
func selfProc() meteredProc { return meteredProc{pid: os.Getpid()} }

// cpuMeter holds the CPU clock ticks of some processes at the start of a
// measured run.
type cpuMeter struct {
	procs []meteredProc
	start []uint64
}

// startCPUMeter reads the clocks of procs.
func startCPUMeter(procs ...meteredProc) (*cpuMeter, error) {
	m := &cpuMeter{procs: procs}
	t, err := m.read()
	if err != nil {
		return nil, err
	}
	m.start = t
	return m, nil
}

func (m *cpuMeter) read() ([]uint64, error) {
	out := make([]uint64, len(m.procs))
	for i, p := range m.procs {
		var err error
		if out[i], err = procstat.ProcessTicks(p.pid, p.tree); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// perUnit reads the clocks again and returns each process's CPU since the
// start in µs per unit of units (> 0).
func (m *cpuMeter) perUnit(units int64) ([]float64, error) {
	if units <= 0 {
		return nil, errors.New("cpu meter: nothing measured")
	}
	now, err := m.read()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(now))
	for i := range now {
		out[i] = float64(now[i]-m.start[i]) / procstat.ClockTicks * 1e6 / float64(units)
	}
	return out, nil
}
