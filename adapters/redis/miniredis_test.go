package redis_test

import (
	"testing"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redismem"
)

// TestContractOnMiniredis runs the reservation suite against this
// adapter's Lua scripts on miniredis, an in-process Redis whose scripts
// run in gopher-lua, with its key expiry driven by the suite's clock
// (adapters/testkit/redismem, the application tests' Redis). The scripts
// are the one home of the reservation rules; this shows they run unchanged
// in process, so the fast double of the application tests runs them
// instead of writing the rules a second time (docs/architecture.md).
func TestContractOnMiniredis(t *testing.T) {
	for name, lanes := range map[string]int{"Reservations": 1, "ReservationsOnStockLanes": 3} {
		t.Run(name, func(t *testing.T) {
			contracttest.Reservations(t, func(t *testing.T, cfg contracttest.ReservationsConfig) contracttest.ReservationsSetup {
				s := redismem.New(t, memory.ClockFunc(cfg.Now), redis.Config{Namespace: "mr",
					RateLimit: redis.RateLimit{Capacity: cfg.RateCapacity, RefillPerSecond: cfg.RefillPerSecond}}).Store
				return contracttest.ReservationsSetup{Reservations: s, Admission: s, Backlog: s, StockLanes: lanes}
			})
		})
	}
}
