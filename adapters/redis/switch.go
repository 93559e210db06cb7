package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

// The activity switch (ports.ActivitySwitch): an operator's pause and the
// end of a sale are fields of the rules hash of every lane of the activity
// SKU ("paused" = "1", "ends_ms"), which reserve.lua reads in the same
// script that takes the unit, so a Reserve that starts after SetPaused or
// SetEndsAt returned sees the change. The seed and the rebuild from
// PostgreSQL write the same fields (seed.lua, rebuild.lua).

// switchScript is the name of lua/switch.lua. The script is not one of
// scriptNames: the switch runs a few times per sale, so it is loaded per
// call (goredis.Script.Run: EVALSHA, then EVAL on NOSCRIPT).
const switchScript = "switch"

// SetPaused implements ports.ActivitySwitch: once it returns nil no
// Reserve of the SKU succeeds while paused (ports.ErrActivityPaused), in
// any lane. Idempotent; ports.ErrNotFound when no lane of the SKU is
// seeded. A lane without rules while others have them (a lane lost with
// its Redis master) is skipped: its rebuild seeds a.Paused.
func (s *Store) SetPaused(ctx context.Context, a ports.Activity, paused bool) error {
	return s.setSwitch(ctx, a, "paused", flag(paused))
}

// SetEndsAt implements ports.ActivitySwitch: once it returns nil Reserve
// answers ports.ErrActivityEnded for a reservation created at or after
// endsAt, in any lane. Idempotent; ports.ErrNotFound as SetPaused.
func (s *Store) SetEndsAt(ctx context.Context, a ports.Activity, endsAt time.Time) error {
	if endsAt.IsZero() {
		return ports.InvalidField("ends_at", "must be set")
	}
	return s.setSwitch(ctx, a, "ends_ms", itoa(endsAt.UnixMilli()))
}

// setSwitch runs switch.lua on every lane of a, one after the other,
// before it returns.
func (s *Store) setSwitch(ctx context.Context, a ports.Activity, field, value string) error {
	src, err := luaFS.ReadFile("lua/" + switchScript + ".lua")
	if err != nil {
		return fmt.Errorf("read script %s: %w", switchScript, err)
	}
	script := goredis.NewScript(string(src))
	n, err := s.laneCount(ctx, a.ActivityID, a.SKUID)
	if err != nil {
		return err
	}
	if n == 1 && a.Lanes() > 1 {
		// Lane 0's rules are not there (lost, or never seeded): every
		// lane of the activity's own count is switched.
		n = a.Lanes()
	}
	seen, changed := 0, 0
	for k := range n {
		sk := s.lane(a.ActivityID, a.SKUID, k, n)
		start := time.Now()
		c, err := script.Run(ctx, s.client, []string{sk.rules}, field, value).Int64()
		s.metrics.observeScript(switchScript, time.Since(start))
		if err != nil {
			return wrapErr("activity switch "+field, err)
		}
		if c >= 0 {
			seen++
		}
		if c == 1 {
			changed++
		}
	}
	if seen == 0 {
		return fmt.Errorf("activity switch %s of activity %d sku %d: not seeded: %w", field, a.ActivityID, a.SKUID, ports.ErrNotFound)
	}
	s.logger.InfoContext(ctx, "activity switch set", "activity_id", a.ActivityID, "sku_id", a.SKUID,
		"field", field, "value", value, "lanes", n, "lanes_changed", changed)
	return nil
}

// flag is a boolean as the scripts read it.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

var _ ports.ActivitySwitch = (*Store)(nil)
