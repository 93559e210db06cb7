package promnames_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckill-dev/seckill/adapters/testkit/promnames"
)

func TestMetricNames(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{"bare name", `up`, []string{"up"}},
		{"rate", `rate(rpc_server_handled_total[5m])`, []string{"rpc_server_handled_total"}},
		{"sum by before the argument",
			`sum by (procedure, code) (rate(rpc_server_handled_total[$__rate_interval]))`,
			[]string{"rpc_server_handled_total"}},
		{"sum by after the argument", `sum(rate(mq_publish_total[5m])) by (topic, outcome)`,
			[]string{"mq_publish_total"}},
		{"sum without", `sum without (instance, topic) (rate(mq_publish_unknown_total[5m]))`,
			[]string{"mq_publish_unknown_total"}},
		{"histogram_quantile with sum by (le)",
			`histogram_quantile(0.99, sum by (le) (rate(rpc_server_handling_seconds_bucket{procedure=~".*/PlaceOrder"}[$__rate_interval])))`,
			[]string{"rpc_server_handling_seconds_bucket"}},
		{"label names that look like metrics", `sum by (le, instance, job) (x_bucket)`, []string{"x_bucket"}},
		{"on and group_left with empty lists",
			"max without (instance) (reservation_unresolved_oldest_age_seconds)\n/ on () group_left ()\nseckill:reservation_ttl_seconds\n",
			[]string{"reservation_unresolved_oldest_age_seconds", "seckill:reservation_ttl_seconds"}},
		{"on and group_left with labels",
			`rate(a_total[5m]) * on (job, instance) group_left (version, revision) seckill_build_info`,
			[]string{"a_total", "seckill_build_info"}},
		{"ignoring and group_right without a list", `a / ignoring (code) group_right b`, []string{"a", "b"}},
		{"matcher values with braces, commas and quotes",
			`foo{path="/a{b},c}", re=~"x{2,3}", q='it\'s }', r=` + "`raw},{`" + `, e!="\"}"}`,
			[]string{"foo"}},
		{"matcher block after white space", `foo {job="x"} + bar{}`, []string{"bar", "foo"}},
		{"offset", `rate(foo_total[5m] offset 1h)`, []string{"foo_total"}},
		{"negative offset", `foo offset -30m`, []string{"foo"}},
		{"offset by a variable", `foo offset $__interval`, []string{"foo"}},
		{"compound duration", `increase(foo_total[1h30m])`, []string{"foo_total"}},
		{"subquery", `max_over_time(rate(foo_total[1m])[5m:30s])`, []string{"foo_total"}},
		{"subquery with the default step", `min_over_time(bar[1h:])`, []string{"bar"}},
		{"subquery of variables", `deriv(gauge_x[$__range:$__interval])`, []string{"gauge_x"}},
		{"Grafana variables in matchers",
			`rate(x_total{instance=~"$instance", job=~"${job:regex}"}[$__rate_interval])`,
			[]string{"x_total"}},
		{"Grafana variable as a matcher value", `y{job=$job}`, []string{"y"}},
		{"Grafana variable in braces as a range", `rate(z_total[${__rate_interval}])`, []string{"z_total"}},
		{"Grafana old bracket variable", `rate(w_total[[[interval]]])`, []string{"w_total"}},
		{"Grafana variable as a value", `topk($n, v)`, []string{"v"}},
		{"name built from a variable", `rate(${prefix}_total[5m]) + seckill_${suffix}`, nil},
		{"nested functions", `clamp_min(abs(delta(stock_x[10m])), 0)`, []string{"stock_x"}},
		{"strings as function arguments",
			`label_replace(rate(rpc_y[5m]), "method", "$1", "procedure", ".*/(.*)")`,
			[]string{"rpc_y"}},
		{"recording rule name", `job:mq_publish_unknown:ratio_rate5m > 0.001`,
			[]string{"job:mq_publish_unknown:ratio_rate5m"}},
		{"recording rule over a range",
			"job:reservation_unresolved_oldest_age:ttl_ratio > 0.4\nand\ndelta(job:reservation_unresolved_oldest_age:ttl_ratio[2m]) > 0\n",
			[]string{"job:reservation_unresolved_oldest_age:ttl_ratio"}},
		{"vector", `vector(300)`, nil},
		{"functions without metrics", `time() - 5 * scalar(vector(1))`, nil},
		{"not equal", `stock_conservation_drift != 0`, []string{"stock_conservation_drift"}},
		{"bool", `up == bool 1`, []string{"up"}},
		{"bool with a function", `rate(a_total[1m]) > bool 0`, []string{"a_total"}},
		{"set operators", `a unless b or c and d`, []string{"a", "b", "c", "d"}},
		{"atan2", `a atan2 b`, []string{"a", "b"}},
		{"keywords in capitals", `SUM BY (job) (x) OR Max Without (instance) (y)`, []string{"x", "y"}},
		{"__name__ equality", `{__name__="foo", job="x"}`, []string{"foo"}},
		{"__name__ regular expression", `{__name__=~"foo.*"}`, nil},
		{"quoted name", `{"utf8.metric", a="b"}`, []string{"utf8.metric"}},
		{"sorted and unique", `b / a + b * a`, []string{"a", "b"}},
		{"aggregations with a parameter", `topk(5, x) + count_values("v", y) + quantile(0.9, z) + limitk(2, w)`,
			[]string{"w", "x", "y", "z"}},
		{"number literals", `x > 1e3 + 0x1F - .5 + 1_000 + 1e-3 + Inf - NaN`, []string{"x"}},
		{"signed infinity", `x < -Inf`, []string{"x"}},
		{"comment", "x # comment naming not_a_metric\n+ y", []string{"x", "y"}},
		{"@ modifier", `x @ start() + rate(y[5m] @ 1609746000)`, []string{"x", "y"}},
		{"absent", `absent(up{job="x"})`, []string{"up"}},
		{"count with group", `count(group by (sku_id) (stock_conservation_drift))`,
			[]string{"stock_conservation_drift"}},
		{"empty", ``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := promnames.MetricNames(tt.expr)
			if err != nil {
				t.Fatalf("MetricNames(%q): %v", tt.expr, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("MetricNames(%q) = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}
}

func TestMetricNamesErrors(t *testing.T) {
	for _, expr := range []string{
		`rate(x[5m]`,
		`x)`,
		`foo{a="b"`,
		`foo{a="b"]`,
		`foo{a}`,
		`x{a=~"unterminated}`,
		`"unterminated`,
		"\"new\nline\"",
		`rate(x[5m)`,
		`x]`,
		`sum by x`,
		`sum by (job x`,
		`foo; bar`,
		`$`,
		`${x`,
		`x{a="\q"}`,
	} {
		if got, err := promnames.MetricNames(expr); err == nil {
			t.Errorf("MetricNames(%q) = %q, want an error", expr, got)
		}
	}
}

// writeFile writes content to name in a temporary directory and returns its
// path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRuleExprs(t *testing.T) {
	const rules = `# Rules.
groups:
  - name: g
    rules:
      - record: job:a:rate5m
        expr: sum(rate(a_total[5m])) # a comment
      - record: "job:b:ratio"
        expr: |
          sum(b)
          /
          sum(c)
      - alert: A
        expr: >-
          x > 1
          and
          y < 2
        for: 1m
        annotations:
          description: |
            expr: not_an_expr
            - record: not_a_record
          summary: "line one
            expr: still_the_summary"
          other: >-
            expr: folded_text
      - alert: B
        expr: "up{job=\"x\"} == 0"
      - alert: C
        expr: 'up{job=''y''} == 0'
      - alert: D
        expr: rate(d_total[5m])
          > 0
      - alert: E
        expr:
          e_metric > 0
      - alert: F
        expr: |-
          f_metric

          > 0
      - alert: G
        expr: >
            indented_g
        for: 1m
      - record: h
        expr: |2
            h_metric
        labels:
          a: b
      - alert: I
        expr: "multi
          line"
`
	records, exprs, err := promnames.RuleExprs(writeFile(t, "rules.yml", rules))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"job:a:rate5m", "job:b:ratio", "h"}; !slices.Equal(records, want) {
		t.Errorf("records = %q, want %q", records, want)
	}
	want := []string{
		"sum(rate(a_total[5m]))",
		"sum(b)\n/\nsum(c)\n",
		"x > 1 and y < 2",
		`up{job="x"} == 0`,
		`up{job='y'} == 0`,
		"rate(d_total[5m]) > 0",
		"e_metric > 0",
		"f_metric\n\n> 0",
		"indented_g\n",
		"  h_metric\n",
		"multi line",
	}
	if !slices.Equal(exprs, want) {
		t.Errorf("exprs = %q\nwant    %q", exprs, want)
	}
}

func TestRuleExprsErrors(t *testing.T) {
	for name, content := range map[string]string{
		"empty expr":          "rules:\n  - alert: A\n    expr:\n  - alert: B\n    expr: up\n",
		"empty record":        "rules:\n  - record: \"\"\n    expr: up\n",
		"unterminated quote":  "rules:\n  - alert: A\n    expr: \"up\n",
		"bad block header":    "rules:\n  - alert: A\n    expr: |x\n      up\n",
		"text after a quote":  "rules:\n  - alert: A\n    expr: \"up\" == 1\n",
		"bad escape":          "rules:\n  - alert: A\n    expr: \"up{a=\\q}\"\n",
		"two chomping values": "rules:\n  - alert: A\n    expr: |-+\n      up\n",
	} {
		if _, _, err := promnames.RuleExprs(writeFile(t, "rules.yml", content)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, _, err := promnames.RuleExprs(filepath.Join(t.TempDir(), "missing.yml")); err == nil {
		t.Error("missing file: no error")
	}
}

// TestRuleExprsOfTheRepository reads deploy/prometheus/rules.yml: one expr
// per rule, the recording rule names in order, and every expr lexed.
func TestRuleExprsOfTheRepository(t *testing.T) {
	path := filepath.Join("..", "..", "..", "deploy", "prometheus", "rules.yml")
	records, exprs, err := promnames.RuleExprs(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ruleLine := regexp.MustCompile(`^\s*- (alert|record):\s*"?([^"\s]+)"?\s*$`)
	var rules int
	var wantRecords []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := ruleLine.FindStringSubmatch(sc.Text()); m != nil {
			rules++
			if m[1] == "record" {
				wantRecords = append(wantRecords, m[2])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rules == 0 || len(exprs) != rules {
		t.Errorf("%d exprs for %d rules", len(exprs), rules)
	}
	if !slices.Equal(records, wantRecords) {
		t.Errorf("records = %q, want %q", records, wantRecords)
	}
	for _, e := range exprs {
		names, err := promnames.MetricNames(e)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if len(names) == 0 && !strings.HasPrefix(strings.TrimSpace(e), "vector(") {
			t.Errorf("expr %q selects no metric", e)
		}
	}
}

func TestDashboardExprs(t *testing.T) {
	const dashboard = `{
  "title": "t",
  "panels": [
    {"type": "row", "panels": []},
    {"type": "timeseries", "targets": [{"expr": "rate(a_total[5m])"}, {"expr": "b"}]},
    {"type": "text"},
    {"type": "row", "collapsed": true, "panels": [
      {"type": "stat", "targets": [{"expr": "c"}, {"refId": "B"}]}
    ]}
  ],
  "templating": {"list": [{"query": "label_values(d, instance)"}]}
}`
	got, err := promnames.DashboardExprs(writeFile(t, "d.json", dashboard))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"rate(a_total[5m])", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("DashboardExprs = %q, want %q", got, want)
	}

	const old = `{"dashboard": {"rows": [{"panels": [{"targets": [{"expr": "e"}]}]}]}}`
	got, err = promnames.DashboardExprs(writeFile(t, "old.json", old))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"e"}; !slices.Equal(got, want) {
		t.Errorf("DashboardExprs of a wrapped old dashboard = %q, want %q", got, want)
	}

	if _, err := promnames.DashboardExprs(writeFile(t, "bad.json", `{"panels": [`)); err == nil {
		t.Error("bad JSON: no error")
	}
}

func TestExportedNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "A counter."}, []string{"k"})
	counter.WithLabelValues("v").Inc()
	reg.MustRegister(
		counter,
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "A gauge."}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "A histogram."}),
		prometheus.NewSummary(prometheus.SummaryOpts{Name: "s_seconds", Help: "A summary."}),
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unused_total", Help: "No series."}, []string{"k"}),
	)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}

	got, err := promnames.ExportedNames(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"c_total", "g", "h_seconds", "h_seconds_bucket", "h_seconds_count", "h_seconds_sum",
		"s_seconds", "s_seconds_count", "s_seconds_sum"}
	if !slices.Equal(names, want) {
		t.Errorf("ExportedNames = %q, want %q", names, want)
	}

	if _, err := promnames.ExportedNames(strings.NewReader("# TYPE x counter\nx{ 1\n")); err == nil {
		t.Error("bad exposition: no error")
	}
	if got, err := promnames.ExportedNames(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Errorf("empty exposition: %v, %v", got, err)
	}
}
