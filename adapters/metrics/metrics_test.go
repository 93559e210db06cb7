package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-dev/seckill/ports"
)

var _ ports.Metrics = (*Metrics)(nil)

func TestMetricsAreExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ResendOutcome("UNKNOWN")
	m.Unresolved(3, 2*time.Second)
	m.CancelOutcome("NOOP_PAID")
	m.CancelOutcome("CANCELED")
	m.StockDrift(1, 2, 0)
	want := `
# HELP cancel_noop_paid_total Timeout checks that found the order paid.
# TYPE cancel_noop_paid_total counter
cancel_noop_paid_total 1
# HELP reservation_unresolved_oldest_age_seconds Age of the oldest unresolved reservation: the order-create backlog age that drives admission.
# TYPE reservation_unresolved_oldest_age_seconds gauge
reservation_unresolved_oldest_age_seconds 2
# HELP reservation_resend_total Scanner resends of order-create messages by outcome.
# TYPE reservation_resend_total counter
reservation_resend_total{outcome="UNKNOWN"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"cancel_noop_paid_total", "reservation_resend_total", "reservation_unresolved_oldest_age_seconds"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.cancelMessages); got != 2 {
		t.Fatalf("cancel_message_total = %v", got)
	}
	if _, err := New(reg); err == nil {
		t.Fatal("registering twice on one registry must fail")
	}
}
