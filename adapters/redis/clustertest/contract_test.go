// Package clustertest runs the Redis adapter against a Redis Cluster
// (SECKILL_REDIS_CLUSTER_ADDRS, started by the local stack: deploy/local/stack.sh up): the
// shared port suites, the retry test of every script and a slot migration
// under load. It has no non-test code.
package clustertest

import (
	"log/slog"
	"testing"

	"github.com/seckill-dev/seckill/adapters/contracttest"
	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/ports"
)

// TestContract runs the shared port suites against the cluster, each test
// in a namespace of its own.
func TestContract(t *testing.T) {
	// The reservation suite runs on activity SKUs with one stock lane and
	// with their stock split over three lanes, on three hash slots
	// (ports.Activity.StockLanes).
	for name, lanes := range map[string]int{"Reservations": 1, "ReservationsOnStockLanes": 3} {
		t.Run(name, func(t *testing.T) {
			contracttest.Reservations(t, func(t *testing.T, cfg contracttest.ReservationsConfig) contracttest.ReservationsSetup {
				c, ns := redistest.NewCluster(t)
				s, err := redis.New(c, redis.Config{Namespace: ns, Clock: cfg.Now,
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
			c, ns := redistest.NewCluster(t)
			s, err := redis.New(c, redis.Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			return s.OrderViews()
		})
	})
}
