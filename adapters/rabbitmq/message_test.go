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

// TestPickTakesAFreeChannel: a send goes to the first confirm channel,
// from its round-robin turn, that no write holds, and waits for its turn's
// channel only when every one is writing.
func TestPickTakesAFreeChannel(t *testing.T) {
	chans := make([]*confirmChannel, 4)
	for i := range chans {
		chans[i] = &confirmChannel{sem: make(chan struct{}, 1)}
	}
	hold := func(i int) { chans[i].sem <- struct{}{} }
	if got := pick(chans, 5); got != chans[1] {
		t.Fatalf("all free, turn 5: got another channel than the turn's own (1)")
	}
	hold(1)
	hold(2)
	if got := pick(chans, 5); got != chans[3] {
		t.Fatalf("1 and 2 busy, turn 5: got another channel than 3")
	}
	hold(3)
	if got := pick(chans, 5); got != chans[0] {
		t.Fatalf("only 0 free, turn 5: got another channel than 0")
	}
	hold(0)
	if got := pick(chans, 6); got != chans[2] {
		t.Fatalf("all busy, turn 6: got another channel than the turn's own (2)")
	}
}
