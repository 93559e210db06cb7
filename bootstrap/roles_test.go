package bootstrap_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// TestRolesSplitTheWork: an instance of the api role serves PlaceOrder but
// runs no consumer, so its reservations become orders only through an
// instance of the workers role that shares its database, Redis and broker;
// together they keep every invariant.
func TestRolesSplitTheWork(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		role := func(r string) func(*config.Config) { return func(c *config.Config) { c.Role = r } }
		front := startSystem(t, options{broker: broker, configure: role(config.RoleAPI)})
		const activity, stock, buyers = 1, 100, 150
		front.activity(activity, stock, 15*time.Minute, 5*time.Minute)

		names := func(ws []bootstrap.Worker) []string {
			var out []string
			for _, w := range ws {
				out = append(out, w.Name)
			}
			return out
		}
		if got := names(front.app.Workers); !slices.Equal(got, []string{"backlog-gate", "sent-marker", "event-tail"}) {
			t.Fatalf("api role runs %v, want the backlog gate, the sent marker and the event tail reader only", got)
		}

		var won atomic.Int64
		concurrently(buyers, 16, func(i int) {
			user := int64(20_000 + i)
			if _, err := front.place(context.Background(), user, activity, fmt.Sprintf("r-%d", user)); err == nil {
				won.Add(1)
			}
		})
		if won.Load() != stock {
			t.Fatalf("%d reservations, want %d", won.Load(), stock)
		}
		if n := front.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity); n != 0 {
			t.Fatalf("%d orders before any workers instance runs", n)
		}

		back := startSystem(t, options{peer: front, configure: role(config.RoleWorkers)})
		if back.base != "" {
			t.Fatalf("the workers role serves an API at %s", back.base)
		}
		got := names(back.app.Workers)
		if slices.Contains(got, "backlog-gate") || slices.Contains(got, "sent-marker") ||
			!slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "consumer ") }) {
			t.Fatalf("workers role runs %v, want the consumers and background loops without the API's", got)
		}
		front.invariants(activity)
		if n := front.count(`SELECT count(*) FROM orders WHERE activity_id = $1`, activity); n != stock {
			t.Fatalf("orders %d, want %d", n, stock)
		}
	})
}
