package redis

import (
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

func TestBacklogStats(t *testing.T) {
	t.Parallel()
	f := newFixture(t, withClock)
	ctx := ctxT(t)
	if st, err := f.s.Stats(ctx); err != nil || st != (ports.BacklogStats{}) {
		t.Fatalf("empty stats = %+v, %v", st, err)
	}
	f.seed(1, 1, 10)
	f.seed(2, 1, 10)
	r1 := f.reserve(1, 1, 1, testBase.Add(-10*time.Second), testBase)
	r2 := f.reserve(1, 1, 2, testBase.Add(-5*time.Second), testBase)
	r3 := f.reserve(2, 1, 1, testBase.Add(-20*time.Second), testBase)
	if err := f.s.MarkSent(ctx, ref(r3)); err != nil {
		t.Fatal(err)
	}
	check := func(step string, want ports.BacklogStats) {
		t.Helper()
		got, err := f.s.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Unresolved != want.Unresolved || got.PendingSend != want.PendingSend ||
			!got.OldestUnresolvedAt.Equal(want.OldestUnresolvedAt) || !got.OldestPendingSendAt.Equal(want.OldestPendingSendAt) {
			t.Fatalf("%s: stats = %+v, want %+v", step, got, want)
		}
	}
	check("after reserve", ports.BacklogStats{
		Unresolved: 3, OldestUnresolvedAt: testBase.Add(-20 * time.Second),
		PendingSend: 2, OldestPendingSendAt: testBase.Add(-10 * time.Second),
	})

	gauges := gatherGauges(t, f)
	if gauges["reservation_mq_pending"] != 2 || gauges["reservation_mq_pending_oldest_age_seconds"] != 10 {
		t.Fatalf("gauges = %v, want pending 2 and oldest age 10s", gauges)
	}

	if err := f.s.MarkOrdered(ctx, []ports.ReservationRef{ref(r1)}); err != nil {
		t.Fatal(err)
	}
	check("after ordered", ports.BacklogStats{
		Unresolved: 2, OldestUnresolvedAt: testBase.Add(-20 * time.Second),
		PendingSend: 1, OldestPendingSendAt: testBase.Add(-5 * time.Second),
	})
	if _, err := f.s.Release(ctx, ref(r3), reservation.ReasonNoFinalStock); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Release(ctx, ref(r2), reservation.ReasonSendFailed); err != nil {
		t.Fatal(err)
	}
	check("after releases", ports.BacklogStats{})
	gauges = gatherGauges(t, f)
	if gauges["reservation_mq_pending"] != 0 || gauges["reservation_mq_pending_oldest_age_seconds"] != 0 {
		t.Fatalf("gauges = %v, want zeros", gauges)
	}
}

// gatherGauges scrapes the fixture's registry: gauge values by name, and
// the sample count of redis_script_duration_seconds under its name.
func gatherGauges(t *testing.T, f *fixture) map[string]float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[mf.GetName()] += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if out["redis_script_duration_seconds"] == 0 {
		t.Fatalf("redis_script_duration_seconds has no samples: %v", out)
	}
	return out
}
