package rabbitmq

import (
	"testing"
	"time"
)

// TestCeilMillis: a delivery time stored in milliseconds is never before
// the time it stands for.
func TestCeilMillis(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_123)
	for _, d := range []time.Duration{0, time.Nanosecond, 999 * time.Microsecond, time.Millisecond} {
		at := base.Add(d)
		if got := time.UnixMilli(ceilMillis(at)); got.Before(at) || got.Sub(at) >= time.Millisecond {
			t.Errorf("ceilMillis(%v) = %v", at, got)
		}
	}
}
