package brokerkit_test

import (
	"testing"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// TestRetryWindowHalvesOnFailuresAndRegrowsOnAnswers checks the retry
// budget: a full window refuses, a failed retry halves the window (never
// below the minimum), a canceled one leaves it, answered retries widen it
// again, capped.
func TestRetryWindowHalvesOnFailuresAndRegrowsOnAnswers(t *testing.T) {
	w := brokerkit.NewRetryWindow()
	for i := range brokerkit.RetryWindowStart {
		if !w.Acquire() {
			t.Fatalf("acquire %d of a window of %d refused", i+1, brokerkit.RetryWindowStart)
		}
	}
	if w.Acquire() {
		t.Fatal("a full window admitted one more retry")
	}
	for range brokerkit.RetryWindowStart {
		w.Release(false, true)
	}
	if got := w.Size(); got != brokerkit.RetryWindowMin {
		t.Fatalf("window after %d failed retries = %d, want the minimum %d", brokerkit.RetryWindowStart, got, brokerkit.RetryWindowMin)
	}
	first, second, third := w.Acquire(), w.Acquire(), w.Acquire()
	if !first || !second || third {
		t.Fatal("a window of 2 must admit exactly 2 retries")
	}
	w.Release(false, false)
	w.Release(false, false)
	if got := w.Size(); got != brokerkit.RetryWindowMin {
		t.Fatalf("canceled retries changed the window to %d", got)
	}
	for range 2 * brokerkit.RetryWindowMax {
		if !w.Acquire() {
			t.Fatal("an empty window refused a retry")
		}
		w.Release(true, false)
	}
	if got := w.Size(); got != brokerkit.RetryWindowMax {
		t.Fatalf("window after many answered retries = %d, want the cap %d", got, brokerkit.RetryWindowMax)
	}
}
