package rocketmq

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// The broker's consumer gauges (5.5.0 BrokerMetricsConstant, as its
// Prometheus exporter names them), per consumer_group and topic.
const (
	brokerReadyMessages = "rocketmq_consumer_ready_messages"
	brokerLagMessages   = "rocketmq_consumer_lag_messages"
	brokerLagLatencyMs  = "rocketmq_consumer_lag_latency_milliseconds"
)

// DefaultLagEvery is how often a LagCollector reads the brokers'
// exporters at most, unless told otherwise: the broker computes the
// figures every few seconds itself, so fresher reads buy little.
const DefaultLagEvery = 15 * time.Second

// lagReadTimeout bounds one read of one exporter (a long-lived store's
// exposition runs to thousands of series).
const lagReadTimeout = 5 * time.Second

// LagCollector re-exports, for the consumer groups of this service, the
// consumer backlog the brokers themselves compute (each broker's Prometheus
// exporter, broker.conf metricsExporterType=PROM and
// enableLagAndDlqMetrics=true):
//
//   - mq_consumer_ready{group}: messages stored and not yet delivered;
//   - mq_consumer_lag_messages{group}: messages not yet acknowledged
//     (ready plus delivered and unacknowledged);
//   - mq_consumer_lag_seconds{group}: the age of the oldest message not yet
//     acknowledged (0 when there is none);
//   - mq_broker_metrics_up: 1 when the last read of every broker's exporter
//     succeeded.
//
// On a cluster a topic's queues are spread over its brokers and each
// broker reports only its own, so the collector reads the exporter of
// every broker (one URL each) and combines them: sums run over the
// brokers and the group's topics, its retry topic included; the age is the
// largest. The brokers compute the figures only for groups with a consumer
// online, so a group appears once its consumer has connected; behind a
// CLUSTER-mode proxy a broker learns of a group from the group's pop
// requests to it (the consumers' heartbeats stay in the proxy), so a group
// counts on a broker once it has received from that broker. The
// exporters are read at most once per the collector's interval (see
// NewLagCollector), when the service's /metrics is scraped, all at once
// with a 5 s timeout each; scrapes in between get the figures of the last
// read. (A broker renders its whole exposition and scans its timer wheel
// for every read: at one read a second that was about a sixth of the
// broker's CPU during a sale, docs/benchmarks.md.) A read that fails on any
// exporter exports only mq_broker_metrics_up 0: the other brokers' figures
// alone would understate the backlog. mq_broker_metrics_up has no label
// per exporter (dashboards and the status page read one series); the log
// names the exporter that failed (a warning when it starts failing, an
// info line when it answers again).
type LagCollector struct {
	urls   []string
	groups map[string]bool
	every  time.Duration
	client *http.Client
	log    *slog.Logger

	ready, lagMessages, lagSeconds, up *prometheus.Desc

	mu      sync.Mutex
	last    time.Time
	cached  []prometheus.Metric
	failing map[string]bool // exporters whose last read failed
}

// NewLagCollector returns a collector reading urls, the brokers' exporters
// (http://host:port/metrics) separated by commas, one per broker of the
// cluster (blanks around a URL and empty items are ignored, a repeated URL
// is read once), for groups (physical names), at most once per every
// (DefaultLagEvery when every <= 0).
func NewLagCollector(urls string, groups []string, every time.Duration, log *slog.Logger) *LagCollector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		every = DefaultLagEvery
	}
	g := make(map[string]bool, len(groups))
	for _, name := range groups {
		g[name] = true
	}
	list := splitMetricsURLs(urls)
	if len(list) == 0 {
		log.Warn("no broker exporter to read: mq_broker_metrics_up stays 0", slog.String("urls", urls))
	}
	return &LagCollector{urls: list, groups: g, every: every, client: &http.Client{Timeout: lagReadTimeout}, log: log,
		failing: map[string]bool{},
		ready: prometheus.NewDesc(brokerkit.MetricConsumerReady,
			"Messages stored for the group and not yet delivered (the brokers' figure, summed over the brokers).", []string{"group"}, nil),
		lagMessages: prometheus.NewDesc(brokerkit.MetricConsumerLagMessages,
			"Messages of the group not yet acknowledged: ready plus delivered and unacknowledged (the brokers' figure, summed over the brokers).", []string{"group"}, nil),
		lagSeconds: prometheus.NewDesc(brokerkit.MetricConsumerLagSeconds,
			"Age of the group's oldest message not yet acknowledged, 0 when none (the brokers' figure, the largest over the brokers).", []string{"group"}, nil),
		up: prometheus.NewDesc(brokerkit.MetricBrokerFiguresUp,
			"1 when the last read of every broker's Prometheus exporter succeeded.", nil, nil),
	}
}

// splitMetricsURLs splits a comma-separated list of exporter URLs,
// dropping blanks, empty items and repeats.
func splitMetricsURLs(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
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
	if time.Since(c.last) >= c.every || c.cached == nil {
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

// read fetches every exporter at once and combines their figures.
func (c *LagCollector) read() []prometheus.Metric {
	down := []prometheus.Metric{prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)}
	if len(c.urls) == 0 {
		return down
	}
	found := make([]map[string]*groupLag, len(c.urls))
	errs := make([]error, len(c.urls))
	var wg sync.WaitGroup
	for i, u := range c.urls {
		wg.Go(func() { found[i], errs[i] = c.fetch(u) })
	}
	wg.Wait()
	byGroup := map[string]*groupLag{}
	ok := true
	for i, u := range c.urls {
		c.note(u, errs[i])
		if errs[i] != nil {
			ok = false
			continue
		}
		for g, v := range found[i] {
			sum := byGroup[g]
			if sum == nil {
				sum = &groupLag{}
				byGroup[g] = sum
			}
			sum.ready += v.ready
			sum.lag += v.lag
			sum.ageMs = max(sum.ageMs, v.ageMs)
		}
	}
	if !ok {
		return down
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

// note logs an exporter's read: a warning when it starts failing, an info
// line when it answers again, debug lines in between.
func (c *LagCollector) note(url string, err error) {
	switch {
	case err != nil && !c.failing[url]:
		c.failing[url] = true
		c.log.Warn("read the broker's consumer lag", slog.String("url", url), slog.String("error", err.Error()))
	case err != nil:
		c.log.Debug("read the broker's consumer lag", slog.String("url", url), slog.String("error", err.Error()))
	case c.failing[url]:
		delete(c.failing, url)
		c.log.Info("the broker's exporter answers again", slog.String("url", url))
	}
}

// fetch reads one broker's exporter and sums its figures per group.
func (c *LagCollector) fetch(url string) (map[string]*groupLag, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lagReadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
			v := m.GetGauge().GetValue()
			if m.GetUntyped() != nil { // an exporter that leaves out the TYPE line
				v = m.GetUntyped().GetValue()
			}
			apply(byGroup[g], v)
		}
	}
	add(brokerReadyMessages, func(l *groupLag, v float64) { l.ready += v })
	add(brokerLagMessages, func(l *groupLag, v float64) { l.lag += v })
	// A topic the broker has no age for (seen on unused retry topics) shows
	// a large negative value: the max with 0 drops it.
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
