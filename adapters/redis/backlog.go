package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

// Stats sums, over every seeded activity SKU, the size of the unresolved
// and pending_created indexes and takes the lowest score (creation time) of
// each, in one pipeline. The counts are not one atomic snapshot across
// slots, which is fine for monitoring.
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
			}
		}
		return nil
	})
	if err != nil {
		return ports.BacklogStats{}, wrapErr("backlog stats", err)
	}
	var (
		st                          ports.BacklogStats
		oldestUnresolved, oldestPnd int64
	)
	for _, c := range cmds {
		st.Unresolved += c.unresolvedN.Val()
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
