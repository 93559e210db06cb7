package redis_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/redis"
)

// TestContractOnMiniredis runs the reservation suite against this
// adapter's Lua scripts on miniredis, an in-process Redis whose scripts
// run in gopher-lua, with its key expiry driven by the suite's clock. The
// scripts are the one home of the reservation rules; this shows they run
// unchanged in process, the ground for a fast test double that runs them
// instead of writing the rules a second time (docs/architecture.md).
func TestContractOnMiniredis(t *testing.T) {
	for name, lanes := range map[string]int{"Reservations": 1, "ReservationsOnStockLanes": 3} {
		t.Run(name, func(t *testing.T) {
			contracttest.Reservations(t, func(t *testing.T, cfg contracttest.ReservationsConfig) contracttest.ReservationsSetup {
				m := miniredis.RunT(t)
				c := goredis.NewClient(&goredis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = c.Close() })
				c.AddHook(newClockSync(m, cfg.Now))
				s, err := redis.New(c, redis.Config{Namespace: "mr", Clock: cfg.Now,
					RateLimit: redis.RateLimit{Capacity: cfg.RateCapacity, RefillPerSecond: cfg.RefillPerSecond}}, nil, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				return contracttest.ReservationsSetup{Reservations: s, Admission: s, Backlog: s, StockLanes: lanes}
			})
		})
	}
}

// clockSync is a go-redis hook that, before every command, moves
// miniredis' clock (TIME and key expiry) to the test's clock.
type clockSync struct {
	m    *miniredis.Miniredis
	now  func() time.Time
	mu   sync.Mutex
	last time.Time
}

func newClockSync(m *miniredis.Miniredis, now func() time.Time) *clockSync {
	c := &clockSync{m: m, now: now, last: now()}
	m.SetTime(c.last)
	return c
}

func (c *clockSync) sync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if d := now.Sub(c.last); d > 0 {
		c.m.FastForward(d)
		c.last = now
	}
	c.m.SetTime(c.last)
}

func (c *clockSync) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *clockSync) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { c.sync(); return next(ctx, cmd) }
}

func (c *clockSync) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error { c.sync(); return next(ctx, cmds) }
}
