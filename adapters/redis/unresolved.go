package redis

import (
	"context"
	"fmt"
	"sort"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/domain/reservation"
)

// Unresolved returns up to limit reservations, across all seeded activity
// SKUs, that are still in the unresolved index (neither ordered nor
// released) and were created before createdBefore, oldest first. It reads
// each slot's index (ZRANGEBYSCORE) and the hashes in one pipeline per
// slot; a reservation resolved between the two reads is skipped. It is
// meant for the reconciler, not for the hot path.
func (s *Store) Unresolved(ctx context.Context, createdBefore time.Time, limit int) ([]reservation.Snapshot, error) {
	if limit <= 0 {
		return nil, nil
	}
	slots, err := s.slotIDs(ctx)
	if err != nil {
		return nil, err
	}
	var out []reservation.Snapshot
	for _, id := range slots {
		sk := s.keys.slotByID(id)
		ids, err := s.client.ZRangeByScore(ctx, sk.unresolved, &goredis.ZRangeBy{
			Min: "-inf", Max: "(" + itoa(ms(createdBefore)), Count: int64(limit),
		}).Result()
		if err != nil {
			return nil, wrapErr("unresolved: read index of "+id, err)
		}
		if len(ids) == 0 {
			continue
		}
		pipe := s.client.Pipeline()
		cmds := make([]*goredis.MapStringStringCmd, len(ids))
		for i, rid := range ids {
			cmds[i] = pipe.HGetAll(ctx, sk.rsv(rid))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, wrapErr("unresolved: read reservations of "+id, err)
		}
		for _, c := range cmds {
			if len(c.Val()) == 0 {
				continue
			}
			st, err := decodeReservation(c.Val())
			if err != nil {
				return nil, fmt.Errorf("redis unresolved %s: %w", id, err)
			}
			switch st.Snapshot.Status {
			case reservation.StatusPending, reservation.StatusSent:
				out = append(out, st.Snapshot)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ReservationID < out[j].ReservationID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
