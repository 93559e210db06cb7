package application

import (
	"testing"
	"time"
)

// TestIdleBackoffDoublesWhileIdleAndResetsOnWork checks the pause of the
// polling workers: base after work, doubling up to max while idle.
func TestIdleBackoffDoublesWhileIdleAndResetsOnWork(t *testing.T) {
	b := newIdleBackoff(50*time.Millisecond, 250*time.Millisecond)
	var got []time.Duration
	for _, n := range []int{3, 0, 0, 0, 0, 1, 0} {
		got = append(got, b.next(n))
	}
	want := []time.Duration{50, 100, 200, 250, 250, 50, 100}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("pauses %v, want %v ms", got, want)
		}
	}
	fixed := newIdleBackoff(50*time.Millisecond, 0)
	if a, b := fixed.next(0), fixed.next(0); a != 50*time.Millisecond || b != 50*time.Millisecond {
		t.Fatal("without a max the pause must stay at base")
	}
}
