package benchevents

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchEventsSmall runs a small `seckill-bench events` on the stack:
// it must succeed (every subscriber's stream was gapless and strictly
// increasing, nothing written went missing) and its JSON line must report
// the whole store caught up both ways, every live event received and both
// sale levels measured. Behaviour only: no timing threshold.
func TestBenchEventsSmall(t *testing.T) {
	t.Setenv("SECKILL_LOG_LEVEL", "error")
	var buf bytes.Buffer
	err := Run(t.Context(), []string{"--events", "299", "--rounds", "2", "--write-batch", "40",
		"--live-rate", "150", "--live-duration", "1s", "--subscribers", "2", "--sale-clients", "4", "--sale-duration", "1s"}, &buf)
	out := buf.String()
	if err != nil {
		t.Fatalf("seckill-bench events: %v\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "{") {
			line = l
		}
	}
	var r eventsResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("the JSON line %q does not parse: %v\n%s", line, err, out)
	}
	if r.Events != 300 || len(r.CatchUpDirect) != 2 || len(r.CatchUpAPI) != 2 || r.CatchUpDirectMed <= 0 || r.CatchUpAPIMed <= 0 {
		t.Errorf("catch-up: %d events, rounds %v / %v, want 300 events (100 paid orders) read in 2 rounds both ways", r.Events,
			r.CatchUpDirect, r.CatchUpAPI)
	}
	if r.LiveEvents != 150 || r.LiveP99Ms < r.LiveP50Ms || r.LiveMaxMs < r.LiveP99Ms {
		t.Errorf("live: %d events, p50 %v p99 %v max %v; want 150 events and ordered percentiles", r.LiveEvents, r.LiveP50Ms, r.LiveP99Ms, r.LiveMaxMs)
	}
	if len(r.SaleRateNone) != 2 || len(r.SaleRateWith) != 2 || r.SaleRateNoneMed <= 0 || r.SaleRateWithMed <= 0 {
		t.Errorf("sale: %v without, %v with subscribers; want 2 positive rates each", r.SaleRateNone, r.SaleRateWith)
	}
	if r.SaleSubscriberEvs <= 0 {
		t.Errorf("the live subscribers received %d events of the sale, want some", r.SaleSubscriberEvs)
	}
	t.Logf("\n%s", out)
}
