package redis_test

import (
	"log/slog"
	"testing"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/ports"
)

// TestContract runs the shared port suites (also run against the
// in-memory adapter) against the real Redis.
func TestContract(t *testing.T) {
	// The reservation suite runs on activity SKUs with one stock lane and
	// with their stock split over three (ports.Activity.StockLanes).
	for name, lanes := range map[string]int{"Reservations": 1, "ReservationsOnStockLanes": 3} {
		t.Run(name, func(t *testing.T) {
			contracttest.Reservations(t, func(t *testing.T, cfg contracttest.ReservationsConfig) contracttest.ReservationsSetup {
				c := redistest.Client(t)
				s, err := redis.New(c, redis.Config{Namespace: redistest.Namespace(t, c), Clock: cfg.Now,
					RateLimit: redis.RateLimit{Capacity: cfg.RateCapacity, RefillPerSecond: cfg.RefillPerSecond}}, nil, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				return contracttest.ReservationsSetup{Reservations: s, Admission: s, Backlog: s, StockLanes: lanes}
			})
		})
	}
	t.Run("OrderViews", func(t *testing.T) {
		contracttest.OrderViews(t, func(t *testing.T) ports.OrderViews {
			c := redistest.Client(t)
			s, err := redis.New(c, redis.Config{Namespace: redistest.Namespace(t, c)}, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			return s.OrderViews()
		})
	})
}
