package rocketmq_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
)

// exporterSample is one line of a broker exporter's consumer gauges.
type exporterSample struct {
	metric, group, topic string
	retry                bool
	value                float64
}

// fakeExporter serves samples as a 5.5.0 broker's Prometheus exporter
// does (HELP and TYPE lines, the broker's labels), or status when it is
// not 200; reads counts the requests.
func fakeExporter(t *testing.T, node string, status int, samples []exporterSample) (url string, reads *atomic.Int32) {
	t.Helper()
	reads = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reads.Add(1)
		if status != http.StatusOK {
			http.Error(w, "unavailable", status)
			return
		}
		var b strings.Builder
		seen := map[string]bool{}
		for _, s := range samples {
			if !seen[s.metric] {
				seen[s.metric] = true
				fmt.Fprintf(&b, "# HELP %s default view for gauge.\n# TYPE %s gauge\n", s.metric, s.metric)
			}
			fmt.Fprintf(&b, "%s{cluster=\"DefaultCluster\",consumer_group=%q,is_retry=\"%t\",is_system=\"false\",node_id=%q,node_type=\"broker\",otel_scope_name=\"broker-meter\",topic=%q} %v\n",
				s.metric, s.group, s.retry, node, s.topic, s.value)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = fmt.Fprint(w, b.String())
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics", reads
}

const (
	exporterReady   = "rocketmq_consumer_ready_messages"
	exporterLag     = "rocketmq_consumer_lag_messages"
	exporterLatency = "rocketmq_consumer_lag_latency_milliseconds"
)

// TestLagCollectorCombinesTheBrokersExporters: with one exporter per
// broker (a comma-separated list, blanks, empty items and a repeat
// included), a group's ready and unacknowledged messages are summed over
// the brokers and its topics, its age is the largest; groups not asked
// for are left out, each exporter is read once for all the scrapes
// within the collector's interval (eight here, a repeated URL once), and
// mq_broker_metrics_up is 1. When one exporter fails (HTTP 503, nothing
// listening, a body that does not parse) the collector exports only
// mq_broker_metrics_up 0, not the other brokers' part of the backlog.
func TestLagCollectorCombinesTheBrokersExporters(t *testing.T) {
	t.Parallel()
	const g, g2, other = "P_CG_A", "P_CG_B", "OTHER_CG"
	urlA, readsA := fakeExporter(t, "broker-a", http.StatusOK, []exporterSample{
		{exporterReady, g, "P_T1", false, 5}, {exporterReady, g, "P_T1", true, 3}, {exporterReady, other, "P_T1", false, 100},
		{exporterLag, g, "P_T1", false, 10}, {exporterLag, g, "P_T1", true, 4}, {exporterLag, other, "P_T1", false, 100},
		{exporterLatency, g, "P_T1", false, 4000}, {exporterLatency, g, "P_T1", true, -9.2233702407735306e18},
		{exporterLatency, other, "P_T1", false, 99000},
	})
	urlB, readsB := fakeExporter(t, "broker-b", http.StatusOK, []exporterSample{
		{exporterReady, g, "P_T1", false, 7}, {exporterReady, g2, "P_T2", false, 2},
		{exporterLag, g, "P_T1", false, 9}, {exporterLag, g2, "P_T2", false, 2},
		{exporterLatency, g, "P_T1", false, 2500}, {exporterLatency, g2, "P_T2", false, 1500},
	})

	reg := prometheus.NewRegistry()
	reg.MustRegister(rocketmq.NewLagCollector(" "+urlA+", "+urlB+" ,,"+urlA, []string{g, g2}, time.Hour, nil))
	want := []struct {
		name, group string
		value       float64
	}{
		{"mq_consumer_ready", g, 15}, {"mq_consumer_lag_messages", g, 23}, {"mq_consumer_lag_seconds", g, 4},
		{"mq_consumer_ready", g2, 2}, {"mq_consumer_lag_messages", g2, 2}, {"mq_consumer_lag_seconds", g2, 1.5},
	}
	for _, w := range want {
		if got := metricValue(t, reg, w.name, map[string]string{"group": w.group}); got != w.value {
			t.Errorf("%s{group=%q} = %v, want %v", w.name, w.group, got, w.value)
		}
	}
	if up := metricValue(t, reg, "mq_broker_metrics_up", nil); up != 1 {
		t.Errorf("mq_broker_metrics_up = %v, want 1", up)
	}
	if metricValue(t, reg, "mq_consumer_ready", map[string]string{"group": other}) != 0 {
		t.Errorf("group %s, not asked for, is exported", other)
	}
	if a, b := readsA.Load(), readsB.Load(); a != 1 || b != 1 {
		t.Errorf("exporter reads: broker-a %d, broker-b %d; want 1 each (eight scrapes within the interval, a repeated URL read once)", a, b)
	}

	failing, _ := fakeExporter(t, "broker-b", http.StatusServiceUnavailable, nil)
	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "rocketmq_consumer_ready_messages{consumer_group=\"P_CG_A\" 5\n")
	}))
	t.Cleanup(garbled.Close)
	for name, second := range map[string]string{
		"HTTP 503":        failing,
		"nothing listens": "http://127.0.0.1:1/metrics",
		"unparsable body": garbled.URL + "/metrics",
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(rocketmq.NewLagCollector(urlA+","+second, []string{g, g2}, time.Second, nil))
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if len(mfs) != 1 || mfs[0].GetName() != "mq_broker_metrics_up" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 0 {
				t.Fatalf("with one exporter failing: %v, want only mq_broker_metrics_up 0", mfs)
			}
		})
	}

	for _, urls := range []string{"", " , "} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(rocketmq.NewLagCollector(urls, []string{g}, time.Second, nil))
		if up := metricValue(t, reg, "mq_broker_metrics_up", nil); up != 0 {
			t.Errorf("no exporter (%q): mq_broker_metrics_up = %v, want 0", urls, up)
		}
	}
}
