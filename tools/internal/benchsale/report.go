package benchsale

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/tools/internal/runreport"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// writeSaleReport writes result.json (every series and the summary) and
// report.html (the summary table, the invariants and one inline SVG line
// chart per plot; no script, no style sheet or font from elsewhere) into
// dir and returns their paths.
func writeSaleReport(dir string, r Result) (jsonPath, htmlPath string, err error) {
	return runreport.WriteFiles(dir, r, newReportPage(r))
}

// salePlots are the data-plot names of the report's charts, in page
// order.
var salePlots = []string{"accepted", "sold-out", "other-answers", "orders", "backlog-age", "outbox", "latency", "cpu"}

func newReportPage(r Result) runreport.Page {
	o := r.Settings
	p := runreport.Page{
		Title: "seckill-bench sale",
		Subtitle: fmt.Sprintf("%s units, %s buyers × %d attempts, arrival %s, %d clients, %s; broker %s; %d cores, %s; started %s",
			group(int64(o.Stock)), group(int64(o.Buyers)), o.Attempts, arrivalText(o), o.Clients, o.load().ProtocolText(),
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
		p.Charts = append(p.Charts, runreport.Chart{Name: c.Name, Title: c.Title, Caption: c.Unit, SVG: template.HTML(c.SVG())})
	}
	return p
}

// summaryRows are the rows of the summary table, shared by stdout and
// report.html.
func summaryRows(r Result) [][2]string {
	s, c := r.Summary, r.Summary.Ceilings
	rows := [][2]string{
		{"load (first call to last answer)", saleSecs(s.LoadSeconds)},
		{"answers: accepted", fmt.Sprintf("%s (%s/s)", group(s.Answers[saleload.Accepted]), saleNum(s.AnswersPerSec[saleload.Accepted]))},
		{"answers: sold out", fmt.Sprintf("%s (%s/s)", group(s.Answers[saleload.SoldOut]), saleNum(s.AnswersPerSec[saleload.SoldOut]))},
		{"answers: already purchased", fmt.Sprintf("%s (%s/s)", group(s.Answers[saleload.AlreadyPurchased]), saleNum(s.AnswersPerSec[saleload.AlreadyPurchased]))},
		{"answers: other", fmt.Sprintf("%s (%s/s)%s", group(s.Answers[saleload.Other]), saleNum(s.AnswersPerSec[saleload.Other]), otherText(s.OtherByCode))},
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
		{"max backlog age (oldest unresolved)", saleSecs(maxOf(r.Series, func(x Sample) float64 { return x.BacklogAgeSeconds }))},
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
func outboxText(s Summary) string {
	if s.OutboxDrained {
		return "yes"
	}
	return fmt.Sprintf("NO (--settle ran out with %s rows unpublished)", group(s.OutboxUnpublishedAtEnd))
}

// relayDrainText is the relay drain, or why there is none.
func relayDrainText(s Summary) string {
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

func maxOf(series []Sample, f func(Sample) float64) float64 {
	m := 0.0
	for _, x := range series {
		m = max(m, f(x))
	}
	return m
}

// saleCharts builds the report's charts from the series.
func saleCharts(r Result) []runreport.Plot {
	xs := make([]float64, len(r.Series))
	for i, s := range r.Series {
		xs[i] = s.T
	}
	col := func(f func(Sample) float64) []float64 {
		out := make([]float64, len(r.Series))
		for i, s := range r.Series {
			out[i] = f(s)
		}
		return out
	}
	var markers []runreport.Marker
	if !r.Summary.LoadEndAt.IsZero() {
		markers = append(markers, runreport.Marker{X: r.Summary.LoadEndAt.Sub(r.StartedAt).Seconds(), Label: "load end"})
	}
	if !r.Summary.LastOrderAt.IsZero() {
		markers = append(markers, runreport.Marker{X: r.Summary.LastOrderAt.Sub(r.StartedAt).Seconds(), Label: "last order"})
	}
	if !r.Summary.LastPublishedAt.IsZero() {
		markers = append(markers, runreport.Marker{X: r.Summary.LastPublishedAt.Sub(r.StartedAt).Seconds(), Label: "last published"})
	}
	line := func(name string, f func(Sample) float64) runreport.Line {
		return runreport.Line{Name: name, X: xs, Y: col(f)}
	}
	charts := []runreport.Plot{
		{Name: "accepted", Title: "Accepted answers per second", Unit: "answers/s",
			Lines: []runreport.Line{line("accepted/s", func(s Sample) float64 { return s.AcceptedPerSec })}},
		{Name: "sold-out", Title: "Sold-out answers per second", Unit: "answers/s",
			Lines: []runreport.Line{line("sold out/s", func(s Sample) float64 { return s.SoldOutPerSec })}},
		{Name: "other-answers", Title: "Already-purchased and other answers per second", Unit: "answers/s",
			Lines: []runreport.Line{
				line("already purchased/s", func(s Sample) float64 { return s.AlreadyPurchasedPerSec }),
				line("other/s", func(s Sample) float64 { return s.OtherPerSec })}},
		{Name: "orders", Title: "Orders committed per second (PostgreSQL)", Unit: "orders/s",
			Lines: []runreport.Line{line("orders/s", func(s Sample) float64 { return s.OrdersPerSec })}},
		{Name: "backlog-age", Title: "Backlog age (service metrics)", Unit: "seconds",
			Lines: []runreport.Line{
				line("oldest unresolved reservation", func(s Sample) float64 { return s.BacklogAgeSeconds }),
				line("oldest unconfirmed send", func(s Sample) float64 { return s.MQPendingAgeSeconds })}},
		{Name: "outbox", Title: "Outbox rows not yet published by the relay (PostgreSQL)", Unit: "rows",
			Lines: []runreport.Line{line("unpublished rows", func(s Sample) float64 { return outboxPoint(s) })}},
		{Name: "latency", Title: "PlaceOrder latency per interval (client side)", Unit: "ms",
			Lines: []runreport.Line{
				line("p50", func(s Sample) float64 { return latencyPoint(s, s.P50Ms) }),
				line("p99", func(s Sample) float64 { return latencyPoint(s, s.P99Ms) })}},
	}
	cpu := runreport.Plot{Name: "cpu", Title: "CPU per process", Unit: "cores"}
	for _, n := range r.Processes {
		cpu.Lines = append(cpu.Lines, line(n, func(s Sample) float64 { return s.CPUCores[n] }))
	}
	charts = append(charts, cpu)
	for i := range charts {
		charts[i].Markers = markers
	}
	return charts
}

// outboxPoint is the sample's unpublished outbox rows, or NaN (no point)
// when the count failed.
func outboxPoint(s Sample) float64 {
	if s.OutboxUnpublished < 0 {
		return math.NaN()
	}
	return float64(s.OutboxUnpublished)
}

// latencyPoint is v, or NaN (no point) for an interval without calls.
func latencyPoint(s Sample, v float64) float64 {
	if s.Calls == 0 {
		return math.NaN()
	}
	return v
}

// writeSaleSummary prints the summary table and the invariants.
func writeSaleSummary(w io.Writer, r Result) {
	for _, row := range summaryRows(r) {
		fmt.Fprintf(w, "%-46s %s\n", row[0], row[1])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-4s %-36s %10s  %s\n", "", "invariant", "violations", "detail")
	for _, c := range r.Invariants {
		v := strconv.FormatInt(c.Violations, 10)
		if !c.Checked {
			v = "-"
		}
		fmt.Fprintf(w, "%-4s %-36s %10s  %s\n", c.ID, c.Name, v, c.Detail)
	}
}
