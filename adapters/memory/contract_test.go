package memory_test

import (
	"testing"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/ports"
)

func TestRedisContract(t *testing.T) {
	contracttest.Reservations(t, func(t *testing.T, cfg contracttest.ReservationsConfig) contracttest.ReservationsSetup {
		r := memory.NewRedis(memory.RedisConfig{
			Clock:     memory.ClockFunc(cfg.Now),
			RateLimit: memory.RateLimit{Capacity: cfg.RateCapacity, RefillPerSecond: cfg.RefillPerSecond},
		})
		return contracttest.ReservationsSetup{Reservations: r, Admission: r, Backlog: r}
	})
}

func TestOrderViewsContract(t *testing.T) {
	contracttest.OrderViews(t, func(t *testing.T) ports.OrderViews {
		return memory.NewRedis(memory.RedisConfig{Clock: memory.NewClock(start)}).OrderViews()
	})
}
