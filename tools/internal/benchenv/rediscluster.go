package benchenv

import (
	"context"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// SumMasterInfo reads one INFO section of every master (of a cluster
// client, or the one node) and sums value over its lines, by address.
func SumMasterInfo(ctx context.Context, rc goredis.UniversalClient, section string, value func(line string) float64) (map[string]float64, error) {
	var mu sync.Mutex
	out := map[string]float64{}
	err := forEachMaster(ctx, rc, func(ctx context.Context, m *goredis.Client) error {
		info, err := m.Info(ctx, section).Result()
		if err != nil {
			return err
		}
		var sum float64
		for line := range strings.SplitSeq(info, "\n") {
			sum += value(strings.TrimSpace(line))
		}
		mu.Lock()
		out[m.Options().Addr] = sum
		mu.Unlock()
		return nil
	})
	return out, err
}

// PurgeClusterNamespace deletes the run's keys on every master.
func PurgeClusterNamespace(ctx context.Context, rc goredis.UniversalClient, ns string) {
	_ = forEachMaster(ctx, rc, func(ctx context.Context, m *goredis.Client) error {
		it := m.Scan(ctx, 0, ns+":*", 1000).Iterator()
		for it.Next(ctx) {
			_ = m.Unlink(ctx, it.Val()).Err()
		}
		return it.Err()
	})
}

// forEachMaster calls fn for every master of a cluster client, or once for
// a single-node client.
func forEachMaster(ctx context.Context, rc goredis.UniversalClient, fn func(context.Context, *goredis.Client) error) error {
	switch c := rc.(type) {
	case *goredis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *goredis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("redis client %T: neither a cluster nor a single node", rc)
}
