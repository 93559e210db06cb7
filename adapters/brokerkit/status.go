package brokerkit

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckill-dev/seckill/ports"
)

// The names of the broker adapters' metrics that ports.MessagingStatus
// reports. The adapters register them under these names and
// RegistryStatus reads them back, so each name is written once.
const (
	// MetricConsumerInflight is mq_consumer_inflight{group}
	// (ConsumerMetrics.Inflight).
	MetricConsumerInflight = "mq_consumer_inflight"
	// MetricConsumerReady is mq_consumer_ready{group}: messages stored
	// for the group and not yet delivered, as the broker reports them.
	MetricConsumerReady = "mq_consumer_ready"
	// MetricConsumerLagMessages is mq_consumer_lag_messages{group}:
	// messages not yet acknowledged, as the broker reports them.
	MetricConsumerLagMessages = "mq_consumer_lag_messages"
	// MetricConsumerLagSeconds is mq_consumer_lag_seconds{group}: the
	// age of the oldest message not yet acknowledged.
	MetricConsumerLagSeconds = "mq_consumer_lag_seconds"
	// MetricBrokerFiguresUp is mq_broker_metrics_up: 1 when the last read
	// of the broker's own figures succeeded.
	MetricBrokerFiguresUp = "mq_broker_metrics_up"
	// MetricBreakerState is mq_breaker_state{endpoint}, valued as
	// ports.BreakerState.
	MetricBreakerState = "mq_breaker_state"
	// MetricSendTimeout is mq_send_timeout_seconds: the adaptive send
	// timeout in force.
	MetricSendTimeout = "mq_send_timeout_seconds"
)

// RegistryStatus is the ports.MessagingStatus of every broker adapter: the
// adapters export their state as the metrics named above, with the same
// names, labels and meaning whatever the broker, and RegistryStatus reads
// them from the process's registry. A figure no adapter registered is
// absent from the snapshot.
type RegistryStatus struct {
	gatherer prometheus.Gatherer
}

// NewRegistryStatus returns the MessagingStatus read from g, the registry
// the broker adapters register with.
func NewRegistryStatus(g prometheus.Gatherer) *RegistryStatus {
	return &RegistryStatus{gatherer: g}
}

var _ ports.MessagingStatus = (*RegistryStatus)(nil)

// MessagingSnapshot implements ports.MessagingStatus. Gathering runs in a
// goroutine of its own that ends with the gathering; when ctx ends first
// the snapshot is empty and the error says so.
func (r *RegistryStatus) MessagingSnapshot(ctx context.Context) (ports.MessagingSnapshot, error) {
	families, err := gatherWithin(ctx, r.gatherer)
	var snap ports.MessagingSnapshot
	byGroup := map[string]*ports.GroupFigures{}
	for _, name := range []string{MetricConsumerLagSeconds, MetricConsumerReady, MetricConsumerLagMessages, MetricConsumerInflight} {
		for _, m := range families[name].GetMetric() {
			g := label(m, "group")
			row := byGroup[g]
			if row == nil {
				row = &ports.GroupFigures{Group: g}
				byGroup[g] = row
			}
			v := value(m)
			switch name {
			case MetricConsumerLagSeconds:
				row.LagSeconds = &v
			case MetricConsumerReady:
				row.Ready = &v
			case MetricConsumerLagMessages:
				row.LagMessages = &v
			case MetricConsumerInflight:
				row.Inflight = &v
			}
		}
	}
	for _, row := range byGroup {
		snap.Groups = append(snap.Groups, *row)
	}
	slices.SortFunc(snap.Groups, func(a, b ports.GroupFigures) int { return cmp.Compare(a.Group, b.Group) })
	if v, ok := firstValue(families, MetricBrokerFiguresUp); ok {
		up := v == 1
		snap.BrokerFiguresUp = &up
	}
	for _, m := range families[MetricBreakerState].GetMetric() {
		snap.Breakers = append(snap.Breakers, ports.BreakerFigure{Endpoint: label(m, "endpoint"), State: ports.BreakerState(value(m))})
	}
	slices.SortFunc(snap.Breakers, func(a, b ports.BreakerFigure) int { return cmp.Compare(a.Endpoint, b.Endpoint) })
	if v, ok := firstValue(families, MetricSendTimeout); ok {
		d := time.Duration(v * float64(time.Second))
		snap.SendTimeout = &d
	}
	return snap, err
}

// gatherWithin gathers g's metric families by name, giving up when ctx
// ends (the gathering goroutine then finishes on its own and its result
// is dropped). A partial failure returns the families gathered together
// with the error.
func gatherWithin(ctx context.Context, g prometheus.Gatherer) (map[string]*dto.MetricFamily, error) {
	type result struct {
		families []*dto.MetricFamily
		err      error
	}
	ch := make(chan result, 1)
	go func() {
		fs, err := g.Gather()
		ch <- result{fs, err}
	}()
	select {
	case r := <-ch:
		out := make(map[string]*dto.MetricFamily, len(r.families))
		for _, f := range r.families {
			out[f.GetName()] = f
		}
		if r.err != nil {
			return out, fmt.Errorf("gather metrics: %w", r.err)
		}
		return out, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("gather metrics: %w", ctx.Err())
	}
}

// firstValue returns the value of the first sample of the family name.
func firstValue(families map[string]*dto.MetricFamily, name string) (float64, bool) {
	ms := families[name].GetMetric()
	if len(ms) == 0 {
		return 0, false
	}
	return value(ms[0]), true
}

// value returns a gauge's, counter's or untyped sample's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

// label returns the value of m's label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
