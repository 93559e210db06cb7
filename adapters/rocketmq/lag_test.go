package rocketmq_test

import (
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// TestLagCollectorReportsTheBrokersBacklog: while a group's only handler
// slot holds its first batch, the messages behind it are reported ready
// (stored, not delivered) with the age of the oldest; once everything is
// acknowledged, the group's lag is 0 again. On the stack's cluster mode
// the topic's queues are spread over both brokers, and the figures are
// those of both exporters (SECKILL_ROCKETMQ_METRICS_URL lists them): the
// held batch comes from one broker, most of the messages behind it wait on
// the other. An exporter that does not answer reports only
// mq_broker_metrics_up 0.
func TestLagCollectorReportsTheBrokersBacklog(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	url := mqtest.MetricsURL(t)
	cfg := relaxed(env.Config)
	pub := startPublisher(t, cfg, nil)
	topic := env.Topic(ports.TopicInventoryCompensate)
	group := env.Group(rocketmq.GroupInventoryCompensate)

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	rec := newRecorder()
	startRunner(t, env.Config, fastRunner(group, map[string]string{topic: "*"}, 1),
		eachMessage(rec, func(ports.Delivery) ports.Decision {
			select {
			case <-release:
			case <-time.After(2 * time.Minute):
			}
			return ports.Acked("applied")
		}), nil)
	labels := map[string]string{"group": group}
	// Behind a CLUSTER-mode proxy a broker learns of a group from its pop
	// requests only (the consumer's heartbeats stay in the proxy) and
	// computes no figures for a group it does not know: wait until every
	// exporter reports the group, while the idle runner's receives go round
	// the brokers. Once the slot holds a batch nothing else is received.
	for _, u := range strings.Split(url, ",") {
		one := prometheus.NewRegistry()
		one.MustRegister(rocketmq.NewLagCollector(u, []string{group}, time.Second, nil))
		waitUntil(t, 60*time.Second, u+" reports the group", func() bool {
			return gathered(t, one, "mq_consumer_lag_messages", labels)
		})
	}
	const n = 20 // one batch of 8 held by the only slot, 12 left ready
	for i := range n {
		mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicInventoryCompensate, MessageID: fmt.Sprint("evt_lag_", i), Body: []byte(`{}`)})
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(rocketmq.NewLagCollector(url, []string{group}, time.Second, nil))
	var ready, msgs, age float64
	waitUntil(t, 60*time.Second, "the broker reports the messages behind the held batch", func() bool {
		ready = metricValue(t, reg, "mq_consumer_ready", labels)
		msgs, age = metricValue(t, reg, "mq_consumer_lag_messages", labels), metricValue(t, reg, "mq_consumer_lag_seconds", labels)
		return ready >= n-8 && msgs >= ready && age > 0
	})
	if up := metricValue(t, reg, "mq_broker_metrics_up", nil); up != 1 {
		t.Fatalf("mq_broker_metrics_up = %v, want 1", up)
	}
	t.Logf("held: %v ready, %v unacknowledged, oldest %.1fs", ready, msgs, age)
	once.Do(func() { close(release) })
	waitUntil(t, 60*time.Second, "the lag goes back to 0", func() bool {
		return len(rec.snapshot()) >= n && metricValue(t, reg, "mq_consumer_lag_messages", labels) == 0 &&
			metricValue(t, reg, "mq_consumer_lag_seconds", labels) == 0
	})

	dead := prometheus.NewRegistry()
	dead.MustRegister(rocketmq.NewLagCollector("http://127.0.0.1:1/metrics", []string{group}, time.Second, nil))
	if up := metricValue(t, dead, "mq_broker_metrics_up", nil); up != 0 {
		t.Fatalf("mq_broker_metrics_up of an unreachable exporter = %v, want 0", up)
	}
	mfs, err := dead.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mq_broker_metrics_up" {
			t.Fatalf("an unreachable exporter still reports %s", mf.GetName())
		}
	}
}

// gathered reports whether reg has a sample of name with exactly labels.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if maps.Equal(got, labels) {
				return true
			}
		}
	}
	return false
}

// waitUntil polls cond every 250 ms until it holds or within passes.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); ; {
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
