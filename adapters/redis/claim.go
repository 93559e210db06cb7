package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/domain/reservation"
)

// ClaimDue leases up to limit due PENDING reservations across all seeded
// activity SKUs. It visits the slots of <ns>:slots (cached for
// Config.SlotsCacheTTL), starting at a rotating offset so that one busy
// activity SKU cannot starve the others. Per slot it reads the due
// candidates (ZRANGEBYSCORE pending -inf now LIMIT remaining) and runs
// claim_due with their hashes in KEYS, which re-checks each one atomically:
// still due, PENDING and not leased. A claimed reservation gets
// lease_owner = owner, lease_until = now + lease, send_attempt + 1, and its
// pending score moves to lease_until, so neither this nor another owner
// claims it again before the lease ends. Concurrent callers get disjoint
// sets.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, owner string, lease time.Duration) ([]reservation.Snapshot, error) {
	if limit <= 0 {
		return nil, nil
	}
	if owner == "" {
		return nil, fmt.Errorf("redis claim due: %w: owner is required", reservation.ErrInvalid)
	}
	if lease <= 0 {
		return nil, fmt.Errorf("redis claim due: %w: lease must be > 0", reservation.ErrInvalid)
	}
	slots, err := s.slotIDs(ctx)
	if err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return nil, nil
	}
	nowMS := ms(now)
	leaseUntil := itoa(nowMS + lease.Milliseconds())
	start := int(s.rotation.Add(1) % uint64(len(slots)))
	var out []reservation.Snapshot
	for i := 0; i < len(slots) && len(out) < limit; i++ {
		id := slots[(start+i)%len(slots)]
		sk := s.keys.slotByID(id)
		ids, err := s.client.ZRangeByScore(ctx, sk.pending, &goredis.ZRangeBy{
			Min: "-inf", Max: itoa(nowMS), Count: int64(limit - len(out)),
		}).Result()
		if err != nil {
			return out, wrapErr("claim due: read pending of "+id, err)
		}
		if len(ids) == 0 {
			continue
		}
		keys := make([]string, 0, 2+len(ids))
		keys = append(keys, sk.pending, sk.pendingCreated)
		args := make([]any, 0, 3+len(ids))
		args = append(args, itoa(nowMS), leaseUntil, owner)
		for _, rid := range ids {
			keys = append(keys, sk.rsv(rid))
			args = append(args, rid)
		}
		reply, err := s.run(ctx, scriptClaimDue, keys, args...).Slice()
		if err != nil {
			return out, wrapErr("claim due "+id, err)
		}
		for _, item := range reply {
			st, err := decodeReservationReply(item)
			if err != nil {
				return out, fmt.Errorf("redis claim due %s: %w", id, err)
			}
			out = append(out, st.Snapshot)
		}
	}
	return out, nil
}

// slotIDs returns the seeded slot ids, read from <ns>:slots at most once
// per Config.SlotsCacheTTL.
func (s *Store) slotIDs(ctx context.Context) ([]string, error) {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	if s.slotsCache != nil && time.Since(s.slotsAt) < s.cfg.SlotsCacheTTL {
		return s.slotsCache, nil
	}
	ids, err := s.client.SMembers(ctx, s.keys.slots()).Result()
	if err != nil {
		return nil, wrapErr("read slots", err)
	}
	slices.Sort(ids)
	s.slotsCache, s.slotsAt = ids, time.Now()
	return ids, nil
}

// addCachedSlot makes a slot seeded by this Store visible at once.
func (s *Store) addCachedSlot(id string) {
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	if s.slotsCache == nil || slices.Contains(s.slotsCache, id) {
		return
	}
	// Copy: callers may be iterating the old slice.
	next := append(slices.Clone(s.slotsCache), id)
	slices.Sort(next)
	s.slotsCache = next
}
