package rocketmq

import "testing"

// TestRetryWindowHalvesOnFailuresAndRegrowsOnAnswers checks the retry
// budget: full window refuses, a failed retry halves the window (never
// below the minimum), answered retries widen it again, capped.
func TestRetryWindowHalvesOnFailuresAndRegrowsOnAnswers(t *testing.T) {
	w := newRetryWindow()
	for i := range retryWindowStart {
		if !w.acquire() {
			t.Fatalf("acquire %d of a window of %d refused", i+1, retryWindowStart)
		}
	}
	if w.acquire() {
		t.Fatal("a full window admitted one more retry")
	}
	for range retryWindowStart {
		w.release(resultTransportFailure)
	}
	if got := w.size(); got != retryWindowMin {
		t.Fatalf("window after %d failed retries = %d, want the minimum %d", retryWindowStart, got, retryWindowMin)
	}
	first, second, third := w.acquire(), w.acquire(), w.acquire()
	if !first || !second || third {
		t.Fatal("a window of 2 must admit exactly 2 retries")
	}
	w.release(resultNeutral)
	w.release(resultNeutral)
	if got := w.size(); got != retryWindowMin {
		t.Fatalf("canceled retries changed the window to %d", got)
	}
	for range 2 * retryWindowMax {
		if !w.acquire() {
			t.Fatal("an empty window refused a retry")
		}
		w.release(resultAnswered)
	}
	if got := w.size(); got != retryWindowMax {
		t.Fatalf("window after many answered retries = %d, want the cap %d", got, retryWindowMax)
	}
}
