package rocketmq

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The broker's consumer gauges (5.5.0 BrokerMetricsConstant, as its
// Prometheus exporter names them), per consumer_group and topic.
const (
	brokerReadyMessages = "rocketmq_consumer_ready_messages"
	brokerLagMessages   = "rocketmq_consumer_lag_messages"
	brokerLagLatencyMs  = "rocketmq_consumer_lag_latency_milliseconds"
)

// LagCollector re-exports, for the consumer groups of this service, the
// consumer backlog the broker itself computes (its Prometheus exporter,
// broker.conf metricsExporterType=PROM and enableLagAndDlqMetrics=true):
//
//   - mq_consumer_ready{group}: messages stored and not yet delivered;
//   - mq_consumer_lag_messages{group}: messages not yet acknowledged
//     (ready plus delivered and unacknowledged);
//   - mq_consumer_lag_seconds{group}: the age of the oldest message not yet
//     acknowledged (0 when there is none);
//   - mq_broker_metrics_up: 1 when the last read of the broker's exporter
//     succeeded.
//
// Sums run over the group's topics, its retry topic included; the age is
// the largest. The broker computes the figures only for groups with a
// consumer online, so a group appears once its consumer has connected. The
// exporter is read at most once per second, when the service's /metrics is
// scraped, with a 2 s timeout; a failed read exports only
// mq_broker_metrics_up 0.
type LagCollector struct {
	url    string
	groups map[string]bool
	client *http.Client
	log    *slog.Logger

	ready, lagMessages, lagSeconds, up *prometheus.Desc

	mu     sync.Mutex
	last   time.Time
	cached []prometheus.Metric
}

// NewLagCollector returns a collector reading url (the broker exporter's
// /metrics) for groups (physical names).
func NewLagCollector(url string, groups []string, log *slog.Logger) *LagCollector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := make(map[string]bool, len(groups))
	for _, name := range groups {
		g[name] = true
	}
	return &LagCollector{url: url, groups: g, client: &http.Client{Timeout: 2 * time.Second}, log: log,
		ready: prometheus.NewDesc("mq_consumer_ready",
			"Messages stored for the group and not yet delivered (the broker's figure).", []string{"group"}, nil),
		lagMessages: prometheus.NewDesc("mq_consumer_lag_messages",
			"Messages of the group not yet acknowledged: ready plus delivered and unacknowledged (the broker's figure).", []string{"group"}, nil),
		lagSeconds: prometheus.NewDesc("mq_consumer_lag_seconds",
			"Age of the group's oldest message not yet acknowledged, 0 when none (the broker's figure).", []string{"group"}, nil),
		up: prometheus.NewDesc("mq_broker_metrics_up",
			"1 when the last read of the broker's Prometheus exporter succeeded.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.lagMessages
	ch <- c.lagSeconds
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.last) >= time.Second || c.cached == nil {
		c.cached = c.read()
		c.last = time.Now()
	}
	for _, m := range c.cached {
		ch <- m
	}
}

// groupLag is one group's sums.
type groupLag struct {
	ready, lag, ageMs float64
}

// read fetches and aggregates the broker's figures.
func (c *LagCollector) read() []prometheus.Metric {
	byGroup, err := c.fetch()
	if err != nil {
		c.log.Debug("read the broker's consumer lag", slog.String("url", c.url), slog.String("error", err.Error()))
		return []prometheus.Metric{prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)}
	}
	out := []prometheus.Metric{prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)}
	for g, v := range byGroup {
		out = append(out,
			prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, v.ready, g),
			prometheus.MustNewConstMetric(c.lagMessages, prometheus.GaugeValue, v.lag, g),
			prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, v.ageMs/1000, g))
	}
	return out
}

func (c *LagCollector) fetch() (map[string]*groupLag, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("broker metrics request: %w", err)
	}
	res, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("broker metrics: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("broker metrics: HTTP %d", res.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("parse broker metrics: %w", err)
	}
	byGroup := map[string]*groupLag{}
	add := func(name string, apply func(*groupLag, float64)) {
		mf := families[name]
		if mf == nil {
			return
		}
		for _, m := range mf.GetMetric() {
			g := labelValue(m, "consumer_group")
			if !c.groups[g] {
				continue
			}
			if byGroup[g] == nil {
				byGroup[g] = &groupLag{}
			}
			apply(byGroup[g], m.GetGauge().GetValue())
		}
	}
	add(brokerReadyMessages, func(l *groupLag, v float64) { l.ready += v })
	add(brokerLagMessages, func(l *groupLag, v float64) { l.lag += v })
	add(brokerLagLatencyMs, func(l *groupLag, v float64) { l.ageMs = max(l.ageMs, v) })
	return byGroup, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
