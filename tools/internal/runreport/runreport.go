// Package runreport writes the report of a bench or chaos run into a
// directory: result.json (the run's result, as the command shaped it) and
// report.html (Page: a summary table, the invariant checks, notes and one
// inline SVG line chart per Plot; no script, no style sheet or font from
// elsewhere, so the file opens anywhere). It computes nothing about the
// run.
package runreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// WriteFiles writes result (as result.json) and page (rendered as
// report.html) into dir and returns their paths.
func WriteFiles(dir string, result any, page Page) (jsonPath, htmlPath string, err error) {
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

// Page is what the HTML template renders.
type Page struct {
	Title      string
	Subtitle   string
	Command    string
	Rows       [][2]string
	Invariants []salekit.InvariantCheck
	Violations int64
	Notes      []string
	Charts     []Chart
}

// Chart is one rendered chart.
type Chart struct {
	Name, Title, Caption string
	SVG                  template.HTML
}

// Line is one series of a chart.
type Line struct {
	Name string
	X, Y []float64
}

// Marker is a dashed vertical line at X.
type Marker struct {
	X     float64
	Label string
}

// Plot is one line chart.
type Plot struct {
	Name, Title, Unit string
	Lines             []Line
	Markers           []Marker
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

// SVG renders the chart as an inline <svg> element with data-plot set to
// its name: axes with ticks, one polyline per series, dashed markers and
// a legend.
func (p Plot) SVG() string {
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
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="end" fill="#444">%s</text>`, padLeft-6, y+4, axisFont, TickLabel(v))
	}
	// X ticks.
	for x := 0.0; x <= xmax+step/1000; x += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`, px(x), padTop+innerH, px(x), padTop+innerH+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="%d" text-anchor="middle" fill="#444">%s</text>`, px(x), padTop+innerH+16, axisFont, TickLabel(x))
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

// TickLabel formats an axis value compactly.
func TickLabel(v float64) string {
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
