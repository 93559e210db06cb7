package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fixedLimits is a ConsumerLimitsSource with fixed figures.
type fixedLimits struct{}

func (fixedLimits) ConsumerLimitStates() []ConsumerLimitState {
	return []ConsumerLimitState{{Group: "g", Limit: 5, Decisions: map[string]uint64{"latency": 3}}}
}
func (fixedLimits) Share() (int, float64) { return 2, 0.5 }

// TestConsumerLimitsAreExported: the collector reads its source at scrape
// time.
func TestConsumerLimitsAreExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterConsumerLimits(reg, fixedLimits{}); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP consumer_concurrency_decisions_total Decisions of the group's adaptive concurrency limiter, by the signal that chose them.
# TYPE consumer_concurrency_decisions_total counter
consumer_concurrency_decisions_total{group="g",reason="latency"} 3
# HELP consumer_concurrency_instances Live worker instances sharing SECKILL_CONSUMER_GLOBAL_BUDGET at the last heartbeat (0: not shared).
# TYPE consumer_concurrency_instances gauge
consumer_concurrency_instances 2
# HELP consumer_concurrency_limit Concurrent handler calls the adaptive limiter allows the consumer group now (SECKILL_CONSUMER_LIMITER=adaptive).
# TYPE consumer_concurrency_limit gauge
consumer_concurrency_limit{group="g"} 5
# HELP consumer_concurrency_share Part of its groups' budgets this instance may use under SECKILL_CONSUMER_GLOBAL_BUDGET (1: not shared).
# TYPE consumer_concurrency_share gauge
consumer_concurrency_share 0.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
