package brokerkit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/ports"
)

// TestRegistryStatusReadsTheAdaptersMetrics registers the metrics as the
// adapters do and reads them back through the port: groups merged by
// label and sorted, absent figures nil, breakers named and sorted, the
// send timeout as a duration.
func TestRegistryStatusReadsTheAdaptersMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	cm, err := brokerkit.NewConsumerMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cm.Inflight.WithLabelValues("CG_B").Set(3)
	cm.Inflight.WithLabelValues("CG_A").Set(1)
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: brokerkit.MetricConsumerLagSeconds, Help: "h"}, []string{"group"})
	lag.WithLabelValues("CG_B").Set(2.5)
	breaker := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: brokerkit.MetricBreakerState, Help: "h"}, []string{"endpoint"})
	breaker.WithLabelValues("b:8081").Set(2)
	breaker.WithLabelValues("a:8081").Set(0)
	timeout := prometheus.NewGauge(prometheus.GaugeOpts{Name: brokerkit.MetricSendTimeout, Help: "h"})
	timeout.Set(0.25)
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: brokerkit.MetricBrokerFiguresUp, Help: "h"})
	reg.MustRegister(lag, breaker, timeout, up)

	snap, err := brokerkit.NewRegistryStatus(reg).MessagingSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Groups) != 2 || snap.Groups[0].Group != "CG_A" || snap.Groups[1].Group != "CG_B" {
		t.Fatalf("groups %+v, want CG_A then CG_B", snap.Groups)
	}
	a, b := snap.Groups[0], snap.Groups[1]
	if a.Inflight == nil || *a.Inflight != 1 || a.LagSeconds != nil || a.Ready != nil || a.LagMessages != nil {
		t.Errorf("CG_A %+v: want in flight 1 and nothing else", a)
	}
	if b.Inflight == nil || *b.Inflight != 3 || b.LagSeconds == nil || *b.LagSeconds != 2.5 {
		t.Errorf("CG_B %+v: want in flight 3, lag 2.5 s", b)
	}
	if snap.BrokerFiguresUp == nil || *snap.BrokerFiguresUp {
		t.Errorf("broker figures up %v, want false (the gauge is 0)", snap.BrokerFiguresUp)
	}
	want := []ports.BreakerFigure{{Endpoint: "a:8081", State: ports.BreakerClosed}, {Endpoint: "b:8081", State: ports.BreakerOpen}}
	if len(snap.Breakers) != 2 || snap.Breakers[0] != want[0] || snap.Breakers[1] != want[1] {
		t.Errorf("breakers %+v, want %+v", snap.Breakers, want)
	}
	if snap.Breakers[1].State.String() != "open" || ports.BreakerState(7).String() != "unknown (7)" {
		t.Errorf("breaker names %q, %q", snap.Breakers[1].State, ports.BreakerState(7))
	}
	if snap.SendTimeout == nil || *snap.SendTimeout != 250*time.Millisecond {
		t.Errorf("send timeout %v, want 250ms", snap.SendTimeout)
	}
}

// TestRegistryStatusWithoutFigures reports nothing as nil or empty, not
// as zero, when no adapter registered the figures.
func TestRegistryStatusWithoutFigures(t *testing.T) {
	snap, err := brokerkit.NewRegistryStatus(prometheus.NewRegistry()).MessagingSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Groups) != 0 || snap.BrokerFiguresUp != nil || len(snap.Breakers) != 0 || snap.SendTimeout != nil {
		t.Fatalf("snapshot %+v, want empty", snap)
	}
}

// blockingGatherer never answers until release closes.
type blockingGatherer struct{ release chan struct{} }

func (g blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	<-g.release
	return nil, nil
}

// TestRegistryStatusBoundedByContext returns when ctx ends even though
// the registry does not answer.
func TestRegistryStatusBoundedByContext(t *testing.T) {
	g := blockingGatherer{release: make(chan struct{})}
	defer close(g.release)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := brokerkit.NewRegistryStatus(g).MessagingSnapshot(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
}
