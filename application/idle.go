package application

import "time"

// idleBackoff is a polling worker's pause: base after a pass that found
// work, doubling after each empty pass up to max, so an idle service
// polls its stores a few times a second instead of tens of times, and
// back to base as soon as a pass finds work again. A max at or below base
// keeps the pause at base.
type idleBackoff struct {
	base, max, cur time.Duration
}

func newIdleBackoff(base, max time.Duration) *idleBackoff {
	return &idleBackoff{base: base, max: max, cur: base}
}

// next returns the pause after a pass that found n items.
func (b *idleBackoff) next(n int) time.Duration {
	switch {
	case n > 0 || b.max <= b.base:
		b.cur = b.base
	default:
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}
