package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

var _ ports.ConsumerPeers = (*Store)(nil)

// Heartbeat implements ports.ConsumerPeers with heartbeat.lua on the
// sorted set <ns>:consumer-instances, scored by the Redis server's clock
// (Config.Clock in tests): it records instance, forgets the instances
// last seen more than ttl ago and returns how many are left. The set
// expires 2 x ttl after the last heartbeat of any instance.
func (s *Store) Heartbeat(ctx context.Context, instance string, ttl time.Duration) (int, error) {
	if instance == "" {
		return 0, errors.New("redis consumer heartbeat: instance is required")
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("redis consumer heartbeat: ttl %v must be > 0", ttl)
	}
	var nowMS int64
	if s.cfg.Clock != nil {
		nowMS = ms(s.cfg.Clock())
	}
	n, err := s.run(ctx, scriptHeartbeat, []string{s.keys.consumerInstances()},
		instance, itoa(max(ttl.Milliseconds(), 1)), itoa(nowMS)).Int()
	if err != nil {
		return 0, wrapErr("consumer heartbeat", err)
	}
	return n, nil
}

// Leave implements ports.ConsumerPeers: it removes instance from the set.
func (s *Store) Leave(ctx context.Context, instance string) error {
	if err := s.client.ZRem(ctx, s.keys.consumerInstances(), instance).Err(); err != nil {
		return wrapErr("consumer leave", err)
	}
	return nil
}
