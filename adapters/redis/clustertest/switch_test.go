package clustertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

// TestSwitchSurvivesALostLaneOnTheCluster: on Redis Cluster, a pause
// reaches every lane of a laned SKU (its lanes on different masters)
// before SetPaused returns; when one lane's keys are lost (its master came
// back empty), the rebuild from PostgreSQL's activity seeds that lane
// paused and opens the others still paused; the resume then sells in
// every lane, and a SKU lost entirely is rebuilt paused too.
func TestSwitchSurvivesALostLaneOnTheCluster(t *testing.T) {
	s, cc, ns := newStore(t)
	ctx := ctxT(t)
	a := open(41, 1, 30)
	a.StockLanes = 3
	if err := s.SeedActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPaused(ctx, a, true); err != nil {
		t.Fatalf("SetPaused: %v", err)
	}
	for user := int64(1); user <= 9; user++ { // three buyers per lane
		_, err := s.Reserve(ctx, newRsv(t, 41, 1, user, "paused"), time.Now())
		if !errors.Is(err, ports.ErrActivityPaused) {
			t.Fatalf("user %d while paused: %v, want ErrActivityPaused", user, err)
		}
	}

	// Lane 1's master lost its data: every key of the lane is gone.
	if n := deleteKeys(t, cc, fmt.Sprintf("%s:{a41:s1:l1*", ns)); n == 0 {
		t.Fatal("lane 1 had no keys")
	}
	const gen = "lost-lane-1"
	if _, err := s.InFlight(ctx, gen, a); err != nil {
		t.Fatalf("InFlight: %v", err)
	}
	p := a
	p.Paused = true
	if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: p, Base: 30}); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	for user := int64(1); user <= 9; user++ {
		_, err := s.Reserve(ctx, newRsv(t, 41, 1, user, "rebuilt"), time.Now())
		if !errors.Is(err, ports.ErrActivityPaused) {
			t.Fatalf("user %d after the rebuild: %v, want ErrActivityPaused (every lane, the lost one seeded paused)", user, err)
		}
	}
	if err := s.SetPaused(ctx, a, false); err != nil {
		t.Fatalf("SetPaused false: %v", err)
	}
	for user := int64(1); user <= 9; user++ {
		if _, err := s.Reserve(ctx, newRsv(t, 41, 1, user, "resumed"), time.Now()); err != nil {
			t.Fatalf("user %d after the resume: %v", user, err)
		}
	}

	b := open(42, 1, 5)
	if err := s.SeedActivity(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := deleteKeys(t, cc, fmt.Sprintf("%s:{a42:s1}:*", ns)); n == 0 {
		t.Fatal("SKU 42 had no keys")
	}
	b.Paused = true
	if _, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: b, Base: 5}); err != nil {
		t.Fatalf("Rebuild of a lost SKU: %v", err)
	}
	_, err := s.Reserve(ctx, newRsv(t, 42, 1, 1, "lost"), time.Now())
	if !errors.Is(err, ports.ErrActivityPaused) {
		t.Fatalf("Reserve of a SKU rebuilt paused: %v, want ErrActivityPaused", err)
	}
}

// deleteKeys deletes the keys matching pattern on every master and
// returns how many it deleted (test namespaces only: KEYS is fine there).
func deleteKeys(t *testing.T, cc *goredis.ClusterClient, pattern string) int {
	t.Helper()
	ctx := ctxT(t)
	var (
		mu   sync.Mutex // ForEachMaster runs the masters concurrently
		keys []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		got, err := c.Keys(ctx, pattern).Result()
		if err != nil {
			return err
		}
		for _, k := range got {
			if err := c.Del(ctx, k).Err(); err != nil {
				return err
			}
		}
		mu.Lock()
		keys = append(keys, got...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}
