package application_test

import (
	"testing"
	"time"

	"github.com/seckill-dev/seckill/application"
)

// TestSaleRatesWindow checks the figures of one activity SKU: accepted
// calls per second over the window, the p99 bound of the calls' latency,
// and that seconds older than the window no longer count.
func TestSaleRatesWindow(t *testing.T) {
	r := application.NewSaleRates(0)
	t0 := time.Unix(1_800_000_000, 0)
	// 100 calls over 5 seconds: 98 fast, 2 slow; 60 accepted.
	for i := range 100 {
		at := t0.Add(time.Duration(i%5) * time.Second)
		lat := time.Millisecond
		if i >= 98 {
			lat = 400 * time.Millisecond
		}
		r.Record(7, 1, at, lat, i < 60)
	}
	now := t0.Add(4*time.Second + 500*time.Millisecond)
	got := r.Rate(7, 1, now)
	if got.Calls != 100 || got.Accepted != 60 || got.Window != application.SaleRateWindow {
		t.Fatalf("Rate = %+v, want 100 calls, 60 accepted over %s", got, application.SaleRateWindow)
	}
	if want := 60 / application.SaleRateWindow.Seconds(); got.AcceptedPerSecond != want {
		t.Errorf("AcceptedPerSecond = %v, want %v", got.AcceptedPerSecond, want)
	}
	// The 99th of 100 calls is a slow one: the bound is above 400 ms and
	// within a bucket of it.
	if got.P99 < 400*time.Millisecond || got.P99 > 480*time.Millisecond {
		t.Errorf("P99 = %s, want the bucket bound of 400ms", got.P99)
	}
	if other := r.Rate(7, 2, now); other.Calls != 0 || other.P99 != 0 {
		t.Errorf("another SKU has figures: %+v", other)
	}
	// Ten seconds after the first second, its calls left the window.
	later := r.Rate(7, 1, t0.Add(application.SaleRateWindow))
	if later.Calls != 80 || later.Accepted != 48 {
		t.Errorf("after the first second left the window: %+v, want 80 calls, 48 accepted", later)
	}
	if gone := r.Rate(7, 1, t0.Add(time.Hour)); gone.Calls != 0 || gone.AcceptedPerSecond != 0 || gone.P99 != 0 {
		t.Errorf("an hour later: %+v, want nothing", gone)
	}
	// A slot reused a window later starts from zero.
	r.Record(7, 1, t0.Add(application.SaleRateWindow), time.Millisecond, true)
	if again := r.Rate(7, 1, t0.Add(application.SaleRateWindow)); again.Calls != 81 || again.Accepted != 49 {
		t.Errorf("after a record in a reused slot: %+v, want 81 calls, 49 accepted", again)
	}
}

// TestSaleRatesBound checks that the recorder tracks at most its number of
// activity SKUs, gives an idle one's slot to a new one, and that a nil
// recorder records nothing.
func TestSaleRatesBound(t *testing.T) {
	r := application.NewSaleRates(2)
	t0 := time.Unix(1_800_000_000, 0)
	r.Record(1, 1, t0, time.Millisecond, true)
	r.Record(2, 1, t0, time.Millisecond, true)
	r.Record(3, 1, t0, time.Millisecond, true)
	if r.Untracked() != 1 || r.Rate(3, 1, t0).Calls != 0 {
		t.Fatalf("a third SKU with two busy slots: untracked %d, rate %+v", r.Untracked(), r.Rate(3, 1, t0))
	}
	later := t0.Add(application.SaleRateWindow)
	r.Record(3, 1, later, time.Millisecond, true)
	if got := r.Rate(3, 1, later); got.Calls != 1 || r.Untracked() != 1 {
		t.Errorf("a third SKU once the others were idle a window: rate %+v, untracked %d", got, r.Untracked())
	}
	var none *application.SaleRates
	none.Record(1, 1, t0, time.Millisecond, true)
	if got := none.Rate(1, 1, t0); got.Calls != 0 || got.Window != application.SaleRateWindow || none.Untracked() != 0 {
		t.Errorf("nil recorder: %+v", got)
	}
}
