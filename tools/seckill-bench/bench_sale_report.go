package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// writeSaleReport writes result.json (every series and the summary) and
// report.html (the summary table, the invariants and one inline SVG line
// chart per plot; no script, no style sheet or font from elsewhere) into
// dir and returns their paths.
func writeSaleReport(dir string, r saleResult) (jsonPath, htmlPath string, err error) {
	return writeReportFiles(dir, r, newReportPage(r))
}

// writeReportFiles writes result (as result.json) and page (rendered as
// report.html) into dir and returns their paths.
func writeReportFiles(dir string, result any, page reportPage) (jsonPath, htmlPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("encode result.json: %w", err)
	}
	jsonPath = filepath.Join(dir, "result.json")
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return "", "", fmt.Errorf("write result.json: %w", err)
	}
	var html bytes.Buffer
	if err := saleReportTemplate.Execute(&html, page); err != nil {
		return "", "", fmt.Errorf("render report.html: %w", err)
	}
	htmlPath = filepath.Join(dir, "report.html")
	if err := os.WriteFile(htmlPath, html.Bytes(), 0o644); err != nil {
		return "", "", fmt.Errorf("write report.html: %w", err)
	}
	return jsonPath, htmlPath, nil
}

// salePlots are the data-plot names of the report's charts, in page
// order.
var salePlots = []string{"accepted", "sold-out", "other-answers", "orders", "backlog-age", "outbox", "latency", "cpu"}

// reportPage is what the HTML template renders.
type reportPage struct {
	Title      string
	Subtitle   string
	Command    string
	Rows       [][2]string
	Invariants []invariantCheck
	Violations int64
	Notes      []string
	Charts     []reportChart
}

// reportChart is one rendered chart.
type reportChart struct {
	Name, Title, Caption string
	SVG                  template.HTML
}

func newReportPage(r saleResult) reportPage {
	o := r.Settings
	p := reportPage{
		Title: "seckill-bench sale",
		Subtitle: fmt.Sprintf("%s units, %s buyers × %d attempts, arrival %s, %d clients, %s; broker %s; %d cores, %s; started %s",
			group(int64(o.Stock)), group(int64(o.Buyers)), o.Attempts, arrivalText(o), o.Clients, protocolText(o),
			r.Broker, r.Cores, r.GoVersion, r.StartedAt.UTC().Format(time.RFC3339)),
		Command: r.Command, Rows: summaryRows(r), Invariants: r.Invariants, Violations: r.Violations,
	}
	if r.ProcessNote != "" {
		p.Notes = append(p.Notes, "CPU: "+r.ProcessNote+".")
	}
	p.Notes = append(p.Notes,
		"P3 is the time of the last committed order (max orders.created_at: the database clock at the start of its order-create transaction, a few milliseconds before the commit) minus the client's receive time of the last accepted reservation (the first answer carrying the last new order id); both clocks are this host's.",
		"CPU per accepted order: the whole sale divides the CPU from the first call until the backlog and the outbox drained (every accepted order resolved and every outbox row published by the relay: the orders' events, FIFO state changes and payment-timeout delay messages) by the accepted orders (it includes the sold-out answers); the selling phase counts only the sampling intervals up to the one holding the last accepted answer.",
		"Relay drain is the time the bench saw the outbox empty (it counts the unpublished rows every 250 ms once every accepted order is resolved) minus the end of the load; the 'last published' line marks max(event_outbox.published_at), the start of the relay transaction that sent the last row.",
		"Rates are per 500 ms sampling interval; CPU is in cores (CPU seconds per second) from /proc/<pid>/stat, PostgreSQL as the postmaster with all its backends.",
		"Dashed vertical lines: the end of the load (last answer), the last committed order and the last outbox row published.")
	for _, c := range saleCharts(r) {
		p.Charts = append(p.Charts, reportChart{Name: c.Name, Title: c.Title, Caption: c.Unit, SVG: template.HTML(c.svg())})
	}
	return p
}

// summaryRows are the rows of the summary table, shared by stdout and
// report.html.
func summaryRows(r saleResult) [][2]string {
	s, c := r.Summary, r.Summary.Ceilings
	rows := [][2]string{
		{"load (first call to last answer)", saleSecs(s.LoadSeconds)},
		{"answers: accepted", fmt.Sprintf("%s (%s/s)", group(s.Answers[outcomeAccepted]), saleNum(s.AnswersPerSec[outcomeAccepted]))},
		{"answers: sold out", fmt.Sprintf("%s (%s/s)", group(s.Answers[outcomeSoldOut]), saleNum(s.AnswersPerSec[outcomeSoldOut]))},
		{"answers: already purchased", fmt.Sprintf("%s (%s/s)", group(s.Answers[outcomeAlreadyPurchased]), saleNum(s.AnswersPerSec[outcomeAlreadyPurchased]))},
		{"answers: other", fmt.Sprintf("%s (%s/s)%s", group(s.Answers[outcomeOther]), saleNum(s.AnswersPerSec[outcomeOther]), otherText(s.OtherByCode))},
		{"PlaceOrder answers per second (whole load)", saleNum(s.CallsPerSec)},
		{"selling rate (accepted until the last one)", fmt.Sprintf("%s/s over %s", saleNum(s.SellingRatePerSec), saleSecs(s.SellingSeconds))},
		{"answers per second once sold out", saleNum(s.SoldOutPhasePerSec)},
		{"PlaceOrder latency p50 / p99", fmt.Sprintf("%s / %s", msText(s.PlaceP50Ms), msText(s.PlaceP99Ms))},
		{"accepted order ids / orders / rejections", fmt.Sprintf("%s / %s / %s", group(int64(s.AcceptedOrders)), group(s.OrdersCommitted), group(int64(s.Rejected)))},
		{"backlog drained", yesNo(s.Drained)},
		{"P3: last order committed - last accepted", saleSecs(s.P3Seconds)},
		{"drain: last order committed - end of load", saleSecs(s.DrainSeconds)},
		{"outbox rows unpublished at the end of the load", group(s.OutboxUnpublishedAtLoadEnd)},
		{"outbox drained (relay published every row)", outboxText(s)},
		{"relay drain: outbox empty - end of load", relayDrainText(s)},
		{"max backlog age (oldest unresolved)", saleSecs(maxOf(r.Series, func(x saleSample) float64 { return x.BacklogAgeSeconds }))},
	}
	for _, n := range r.Processes {
		rows = append(rows, [2]string{"CPU per accepted order: " + n,
			fmt.Sprintf("%s µs whole sale (%s s CPU, %.2f cores on average); %s µs selling phase", saleNum(s.CPUMicrosPerOrder[n]),
				strconv.FormatFloat(s.CPUSeconds[n], 'f', 2, 64), safeDiv(s.CPUSeconds[n], s.MeasuredSeconds), saleNum(s.SellingCPUMicrosPerOrder[n]))})
	}
	rows = append(rows,
		[2]string{"CPU per accepted order: all measured", fmt.Sprintf("%s µs whole sale; %s µs selling phase",
			saleNum(s.CPUMicrosPerOrderAll), saleNum(s.SellingCPUMicrosPerOrderAll))},
		[2]string{fmt.Sprintf("ceiling: reserve script (EVALSHA, %d clients)", c.Clients),
			fmt.Sprintf("%s/s (p50 %s, p99 %s)", saleNum(c.ReservePerSec), msText(c.ReserveP50Ms), msText(c.ReserveP99Ms))},
		[2]string{fmt.Sprintf("ceiling: bare synchronous send (%d clients)", c.Clients),
			fmt.Sprintf("%s/s (p50 %s, p99 %s, %d unknown, %d rejected)", saleNum(c.SendPerSec), msText(c.SendP50Ms), msText(c.SendP99Ms), c.SendUnknown, c.SendRejected)},
		[2]string{"selling rate / min(reserve, send)", fmt.Sprintf("%.1f%%", 100*c.SellingRatio)},
		[2]string{"PlaceOrder answers/s / min(reserve, send)", fmt.Sprintf("%.1f%%", 100*c.CallsRatio)},
		[2]string{"invariant violations", strconv.FormatInt(r.Violations, 10)},
	)
	return rows
}

func otherText(by map[string]int) string {
	if len(by) == 0 {
		return ""
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, by[k])
	}
	return ": " + strings.Join(parts, ", ")
}

// outboxText says whether the outbox drained and, if not, how many rows
// were left.
func outboxText(s saleSummary) string {
	if s.OutboxDrained {
		return "yes"
	}
	return fmt.Sprintf("NO (--settle ran out with %s rows unpublished)", group(s.OutboxUnpublishedAtEnd))
}

// relayDrainText is the relay drain, or why there is none.
func relayDrainText(s saleSummary) string {
	if !s.OutboxDrained {
		return "- (not drained)"
	}
	return saleSecs(s.RelayDrainSeconds)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO (--settle ran out)"
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func saleSecs(s float64) string { return strconv.FormatFloat(s, 'f', 2, 64) + " s" }

func msText(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + " ms" }

// saleNum formats a figure with thousands separators and no decimals (one
// decimal below 100).
func saleNum(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if math.Abs(v) < 100 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return group(int64(math.Round(v)))
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func maxOf(series []saleSample, f func(saleSample) float64) float64 {
	m := 0.0
	for _, x := range series {
		m = max(m, f(x))
	}
	return m
}

// plotLine is one series of a chart.
type plotLine struct {
	Name string
	X, Y []float64
}

// plotMarker is a dashed vertical line at X.
type plotMarker struct {
	X     float64
	Label string
}

// plot is one line chart.
type plot struct {
	Name, Title, Unit string
	Lines             []plotLine
	Markers           []plotMarker
}

// saleCharts builds the report's charts from the series.
func saleCharts(r saleResult) []plot {
	xs := make([]float64, len(r.Series))
	for i, s := range r.Series {
		xs[i] = s.T
	}
	col := func(f func(saleSample) float64) []float64 {
		out := make([]float64, len(r.Series))
		for i, s := range r.Series {
			out[i] = f(s)
		}
		return out
	}
	var markers []plotMarker
	if !r.Summary.LoadEndAt.IsZero() {
		markers = append(markers, plotMarker{X: r.Summary.LoadEndAt.Sub(r.StartedAt).Seconds(), Label: "load end"})
	}
	if !r.Summary.LastOrderAt.IsZero() {
		markers = append(markers, plotMarker{X: r.Summary.LastOrderAt.Sub(r.StartedAt).Seconds(), Label: "last order"})
	}
	if !r.Summary.LastPublishedAt.IsZero() {
		markers = append(markers, plotMarker{X: r.Summary.LastPublishedAt.Sub(r.StartedAt).Seconds(), Label: "last published"})
	}
	line := func(name string, f func(saleSample) float64) plotLine {
		return plotLine{Name: name, X: xs, Y: col(f)}
	}
	charts := []plot{
		{Name: "accepted", Title: "Accepted answers per second", Unit: "answers/s",
			Lines: []plotLine{line("accepted/s", func(s saleSample) float64 { return s.AcceptedPerSec })}},
		{Name: "sold-out", Title: "Sold-out answers per second", Unit: "answers/s",
			Lines: []plotLine{line("sold out/s", func(s saleSample) float64 { return s.SoldOutPerSec })}},
		{Name: "other-answers", Title: "Already-purchased and other answers per second", Unit: "answers/s",
			Lines: []plotLine{
				line("already purchased/s", func(s saleSample) float64 { return s.AlreadyPurchasedPerSec }),
				line("other/s", func(s saleSample) float64 { return s.OtherPerSec })}},
		{Name: "orders", Title: "Orders committed per second (PostgreSQL)", Unit: "orders/s",
			Lines: []plotLine{line("orders/s", func(s saleSample) float64 { return s.OrdersPerSec })}},
		{Name: "backlog-age", Title: "Backlog age (service metrics)", Unit: "seconds",
			Lines: []plotLine{
				line("oldest unresolved reservation", func(s saleSample) float64 { return s.BacklogAgeSeconds }),
				line("oldest unconfirmed send", func(s saleSample) float64 { return s.MQPendingAgeSeconds })}},
		{Name: "outbox", Title: "Outbox rows not yet published by the relay (PostgreSQL)", Unit: "rows",
			Lines: []plotLine{line("unpublished rows", func(s saleSample) float64 { return outboxPoint(s) })}},
		{Name: "latency", Title: "PlaceOrder latency per interval (client side)", Unit: "ms",
			Lines: []plotLine{
				line("p50", func(s saleSample) float64 { return latencyPoint(s, s.P50Ms) }),
				line("p99", func(s saleSample) float64 { return latencyPoint(s, s.P99Ms) })}},
	}
	cpu := plot{Name: "cpu", Title: "CPU per process", Unit: "cores"}
	for _, n := range r.Processes {
		cpu.Lines = append(cpu.Lines, line(n, func(s saleSample) float64 { return s.CPUCores[n] }))
	}
	charts = append(charts, cpu)
	for i := range charts {
		charts[i].Markers = markers
	}
	return charts
}

// outboxPoint is the sample's unpublished outbox rows, or NaN (no point)
// when the count failed.
func outboxPoint(s saleSample) float64 {
	if s.OutboxUnpublished < 0 {
		return math.NaN()
	}
	return float64(s.OutboxUnpublished)
}

// latencyPoint is v, or NaN (no point) for an interval without calls.
func latencyPoint(s saleSample, v float64) float64 {
	if s.Calls == 0 {
		return math.NaN()
	}
	return v
}

// plotColors are the series colors, in order.
var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// The chart geometry, in SVG user units.
const (
	plotW, plotH                              = 1000.0, 300.0
	padLeft, padRight, padTop, padBottom      = 70.0, 20.0, 40.0, 40.0
	innerW, innerH                            = plotW - padLeft - padRight, plotH - padTop - padBottom
	legendCharW, legendGap, legendY, axisFont = 6.5, 24.0, 18.0, 11
)

// svg renders the chart as an inline <svg> element with data-plot set to
// its name: axes with ticks, one polyline per series, dashed markers and
// a legend.
func (p plot) svg() string {
	xmax, ymax := 0.0, 0.0
	for _, l := range p.Lines {
		for i := range l.X {
			xmax = max(xmax, l.X[i])
			if !math.IsNaN(l.Y[i]) && !math.IsInf(l.Y[i], 0) {
				ymax = max(ymax, l.Y[i])
			}
		}
	}
	for _, m := range p.Markers {
		xmax = max(xmax, m.X)
	}
	// The x axis ends at the first whole tick step past the data.
	step := niceCeil(max(xmax, 1) / 10)
	xmax = math.Ceil(max(xmax, 1)/step-1e-9) * step
	ymax = niceCeil(max(ymax*1.05, 1e-9))
	if ymax < 1e-6 {
		ymax = 1
	}
	px := func(x float64) float64 { return padLeft + innerW*x/xmax }
	py := func(y float64) float64 { return padTop + innerH*(1-y/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg data-plot="%s" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="%s">`,
		template.HTMLEscapeString(p.Name), plotW, plotH, plotW, plotH, template.HTMLEscapeString(p.Title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`, plotW, plotH)
	// Horizontal grid and y ticks.
	for i := 0; i <= 5; i++ {
		v := ymax * float64(i) / 5
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`, padLeft, y, padLeft+innerW, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="end" fill="#444">%s</text>`, padLeft-6, y+4, axisFont, tickLabel(v))
	}
	// X ticks.
	for x := 0.0; x <= xmax+step/1000; x += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, px(x), padTop+innerH, px(x), padTop+innerH+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="middle" fill="#444">%s</text>`, px(x), padTop+innerH+16, axisFont, tickLabel(x))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="middle" fill="#444">seconds since the sale started</text>`,
		padLeft+innerW/2, plotH-6, axisFont)
	fmt.Fprintf(&b, `<text x="14" y="%.1f" font-size="%d" fill="#444" transform="rotate(-90 14 %.1f)" text-anchor="middle">%s</text>`,
		padTop+innerH/2, axisFont, padTop+innerH/2, template.HTMLEscapeString(p.Unit))
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`, padLeft, padTop, innerW, innerH)
	for i, m := range p.Markers {
		// Labels are staggered so that close markers stay readable.
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 3"/>`, px(m.X), padTop, px(m.X), padTop+innerH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" fill="#555">%s</text>`, px(m.X)+3, padTop+12+14*float64(i), axisFont, template.HTMLEscapeString(m.Label))
	}
	lx := padLeft
	for i, l := range p.Lines {
		color := plotColors[i%len(plotColors)]
		var pts strings.Builder
		for j := range l.X {
			y := l.Y[j]
			if math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(l.X[j]), py(y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round" points="%s"/>`, color, strings.TrimSpace(pts.String()))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="14" height="4" fill="%s"/>`, lx, legendY-4, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" fill="#222">%s</text>`, lx+18, legendY, axisFont, template.HTMLEscapeString(l.Name))
		lx += 18 + legendCharW*float64(len([]rune(l.Name))) + legendGap
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil rounds v > 0 up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(v)))
	for _, f := range []float64{1, 2, 2.5, 5, 10} {
		if f*exp >= v*(1-1e-9) {
			return f * exp
		}
	}
	return 10 * exp
}

// tickLabel formats an axis value compactly.
func tickLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 10000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// saleReportTemplate is report.html: one page, inline CSS, the charts as
// inline SVG, no script and no external reference.
var saleReportTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1040px; }
h1 { font-size: 22px; margin-bottom: 4px; }
.sub { color: #555; margin-top: 0; }
code { background: #f4f4f4; padding: 2px 4px; }
table { border-collapse: collapse; margin: 12px 0 24px; }
td, th { border: 1px solid #ddd; padding: 4px 10px; text-align: left; font-size: 14px; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; }
.bad { color: #b00020; font-weight: bold; }
.ok { color: #1b7f3b; font-weight: bold; }
figure { margin: 0 0 28px; }
figcaption { font-size: 15px; font-weight: 600; margin-bottom: 4px; }
ul.notes { color: #555; font-size: 13px; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="sub">{{.Subtitle}}</p>
<p><code>{{.Command}}</code></p>
<h2>Summary</h2>
<table>
<tr><th>figure</th><th>value</th></tr>
{{range .Rows}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td></tr>
{{end}}</table>
<h2>Invariants: {{if .Violations}}<span class="bad">{{.Violations}} violations</span>{{else}}<span class="ok">no violation</span>{{end}}</h2>
<table>
<tr><th></th><th>invariant</th><th>violations</th><th>detail</th></tr>
{{range .Invariants}}<tr><td>{{.ID}}</td><td>{{.Name}}</td><td class="num">{{if .Checked}}{{if .Violations}}<span class="bad">{{.Violations}}</span>{{else}}0{{end}}{{else}}-{{end}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
<h2>Over time</h2>
{{range .Charts}}<figure id="plot-{{.Name}}">
<figcaption>{{.Title}} ({{.Caption}})</figcaption>
{{.SVG}}
</figure>
{{end}}
<ul class="notes">
{{range .Notes}}<li>{{.}}</li>
{{end}}</ul>
</body>
</html>
`))
