package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

// Stats sums, over every seeded activity SKU, the size of the unresolved
// and pending_created indexes and takes the lowest score (creation time) of
// each, with the reservation TTL of the SKU's rules, in one pipeline. The
// counts are not one atomic snapshot across slots, which is fine for
// monitoring.
func (s *Store) Stats(ctx context.Context) (ports.BacklogStats, error) {
	slots, err := s.slotIDs(ctx)
	if err != nil {
		return ports.BacklogStats{}, err
	}
	if len(slots) == 0 {
		return ports.BacklogStats{}, nil
	}
	type slotCmds struct {
		unresolvedN, pendingN           *goredis.IntCmd
		unresolvedOldest, pendingOldest *goredis.ZSliceCmd
		ttl                             *goredis.StringCmd
	}
	cmds := make([]slotCmds, len(slots))
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, id := range slots {
			sk := s.keys.slotByID(id)
			cmds[i] = slotCmds{
				unresolvedN:      p.ZCard(ctx, sk.unresolved),
				unresolvedOldest: p.ZRangeWithScores(ctx, sk.unresolved, 0, 0),
				pendingN:         p.ZCard(ctx, sk.pendingCreated),
				pendingOldest:    p.ZRangeWithScores(ctx, sk.pendingCreated, 0, 0),
				ttl:              p.HGet(ctx, sk.rules, "reservation_ttl_ms"),
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return ports.BacklogStats{}, wrapErr("backlog stats", err)
	}
	for _, c := range cmds {
		// A slot without rules (not seeded yet, or being rebuilt) answers
		// Nil for its TTL; any other failure fails the measurement.
		for _, cmd := range []goredis.Cmder{c.unresolvedN, c.unresolvedOldest, c.pendingN, c.pendingOldest} {
			if err := cmd.Err(); err != nil {
				return ports.BacklogStats{}, wrapErr("backlog stats", err)
			}
		}
	}
	var (
		st                          ports.BacklogStats
		oldestUnresolved, oldestPnd int64
	)
	for _, c := range cmds {
		st.Unresolved += c.unresolvedN.Val()
		if n := c.unresolvedN.Val(); n > 0 {
			if ttl, err := c.ttl.Int64(); err == nil && ttl > 0 {
				d := time.Duration(ttl) * time.Millisecond
				if st.ShortestUnresolvedTTL == 0 || d < st.ShortestUnresolvedTTL {
					st.ShortestUnresolvedTTL = d
				}
			}
		}
		st.PendingSend += c.pendingN.Val()
		oldestUnresolved = lowest(oldestUnresolved, c.unresolvedOldest.Val())
		oldestPnd = lowest(oldestPnd, c.pendingOldest.Val())
	}
	st.OldestUnresolvedAt = fromMS(oldestUnresolved)
	st.OldestPendingSendAt = fromMS(oldestPnd)
	return st, nil
}

// lowest returns the smaller of cur (0 = none) and the score of the first
// member of z.
func lowest(cur int64, z []goredis.Z) int64 {
	if len(z) == 0 {
		return cur
	}
	v := int64(z[0].Score)
	if cur == 0 || v < cur {
		return v
	}
	return cur
}
