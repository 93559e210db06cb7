package rabbitmq

import (
	"testing"
	"time"
)

// TestRetryWindow: the window starts at 16 outstanding retries, refuses
// the 17th, halves on a transport failure (never below 2), grows by one
// per answered retry (never above 128), and a retry the caller canceled
// leaves it.
func TestRetryWindow(t *testing.T) {
	w := newRetryWindow()
	for i := range retryWindowStart {
		if !w.acquire() {
			t.Fatalf("acquire %d refused, want %d slots", i+1, retryWindowStart)
		}
	}
	if w.acquire() {
		t.Fatal("acquire beyond the window allowed")
	}
	w.release(false, true)
	if w.size() != retryWindowStart/2 {
		t.Fatalf("after a transport failure the window is %d, want %d", w.size(), retryWindowStart/2)
	}
	for range 10 {
		w.release(false, true)
	}
	if w.size() != retryWindowMin {
		t.Fatalf("window %d after many failures, want the minimum %d", w.size(), retryWindowMin)
	}
	w.release(false, false)
	if w.size() != retryWindowMin {
		t.Fatalf("a canceled retry changed the window to %d", w.size())
	}
	for range 300 {
		w.outstanding++
		w.release(true, false)
	}
	if w.size() != retryWindowMax {
		t.Fatalf("window %d after many answers, want the maximum %d", w.size(), retryWindowMax)
	}
}

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
