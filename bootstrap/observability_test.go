package bootstrap_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/adapters/testkit/promnames"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// TestEveryMetricOfTheRulesAndDashboardIsExported scrapes a running
// service (with the adaptive consumer limiter) after a small sale (orders
// created, a buyer turned away, the reconciler run) and fails on any metric name that an alert rule of
// deploy/prometheus or a query of the deploy/grafana dashboard uses and the
// service does not export: a renamed metric must not silence an alert.
func TestEveryMetricOfTheRulesAndDashboardIsExported(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{configure: func(c *config.Config) {
		readRocketMQExporter(t, c)
		c.Workers.ReconcileInterval = time.Second
		// The dashboard shows the adaptive limiter's series.
		c.Workers.ConsumerLimiter = config.LimiterAdaptive
	}})
	const activity = 7101
	s.activity(activity, 2, time.Hour, 5*time.Minute)
	for user := int64(1); user <= 3; user++ {
		_, _ = s.place(context.Background(), user, activity, fmt.Sprint("req-", user))
	}
	s.settled(activity, 60*time.Second)

	records, exprs := ruleExprs(t)
	dash, err := promnames.DashboardExprs(filepath.Join("..", "deploy", "grafana", "seckill-overview.json"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{} // metric name -> where it is used
	for where, list := range map[string][]string{"rules": exprs, "dashboard": dash} {
		for _, e := range list {
			names, err := promnames.MetricNames(e)
			if err != nil {
				t.Fatalf("%s: %q: %v", where, e, err)
			}
			for _, n := range names {
				if !slices.Contains(records, n) {
					used[n] = append(used[n], where)
				}
			}
		}
	}
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the rules and the dashboard: the reader is broken", len(used))
	}
	var missing []string
	s.eventually(30*time.Second, "every metric the rules and the dashboard use is exported", func() bool {
		exported := scrapeNames(t, s)
		missing = missing[:0]
		for n, where := range used {
			if !exported[n] {
				missing = append(missing, n+" ("+strings.Join(slices.Compact(slices.Sorted(slices.Values(where))), ", ")+")")
			}
		}
		return len(missing) == 0
	})
	t.Logf("%d metric names checked", len(used))
	if len(missing) > 0 {
		t.Fatalf("not exported: %v", missing)
	}
}

// ruleExprs reads the recording rule names and every expression of the
// alert rules.
func ruleExprs(t *testing.T) (records, exprs []string) {
	t.Helper()
	records, exprs, err := promnames.RuleExprs(filepath.Join("..", "deploy", "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	return records, exprs
}

// scrapeNames returns the metric names the service's /metrics exports.
func scrapeNames(t *testing.T, s *system) map[string]bool {
	t.Helper()
	res, err := s.http.Get("http://" + s.app.OpsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", res.StatusCode)
	}
	names, err := promnames.ExportedNames(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// readRocketMQExporter points the RocketMQ adapter of c at the stack
// broker's exporter, read every second: the groups' figures appear once
// their consumers are online.
func readRocketMQExporter(t *testing.T, c *config.Config) {
	rs, ok := c.Broker.Settings.(rocketmq.Settings)
	if !ok {
		t.Fatalf("broker %s: the exporter is RocketMQ's", c.Broker.Name)
	}
	rs.MetricsURL, rs.MetricsEvery = mqtest.MetricsURL(t), time.Second
	c.Broker.Settings = rs
}
