package benchsale

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/testkit/chromium"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// syntheticSaleResult is a sale of 60 seconds with made-up but plausible
// series: a burst that sells out at 8 s and a backlog that drains by
// 14 s.
func syntheticSaleResult() Result {
	start := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)
	procs := []string{"service", "load generator", "broker proxy", "namesrv", "redis", "postgres"}
	r := Result{Settings: Options{Stock: 10000, Buyers: 50000, Attempts: 2, SameRequestShare: 0.5, Arrival: "burst",
		Clients: 256, Protocol: "connect", SettleSeconds: 120, CeilingClients: 64, CeilingCalls: 60000, Seed: 1},
		Command: "seckill-bench sale", Cores: 2, GoVersion: "go1.26.8", StartedAt: start, ActivityID: 42, Processes: procs}
	for i := 1; i <= 120; i++ {
		t := float64(i) / 2
		s := Sample{T: t, Phase: "sale", CPUCores: map[string]float64{}}
		if t <= 8 {
			s.AcceptedPerSec = 1250 + 100*math.Sin(t)
			s.SoldOutPerSec = 50 * t
		} else if t <= 20 {
			s.SoldOutPerSec = 4000
			s.AlreadyPurchasedPerSec = 300
		}
		if t <= 16 {
			s.OutboxUnpublished = int64(1500 * t * (1 - t/16))
		}
		if t <= 14 {
			s.OrdersPerSec = 700
			s.BacklogAgeSeconds = t / 2
			s.P50Ms, s.P99Ms = 20+t, 80+3*t
		}
		if t > 20 {
			s.Phase = "settle"
		}
		for j, p := range procs {
			s.CPUCores[p] = 0.1 * float64(j+1) * math.Max(0, 1-t/30)
		}
		r.Series = append(r.Series, s)
	}
	r.Summary = Summary{LoadSeconds: 20, SellingSeconds: 8, Answers: map[string]int64{saleload.Accepted: 10000,
		saleload.SoldOut: 86000, saleload.AlreadyPurchased: 3990, saleload.Other: 10},
		AnswersPerSec: map[string]float64{saleload.Accepted: 500, saleload.SoldOut: 4300, saleload.AlreadyPurchased: 199.5, saleload.Other: 0.5},
		OtherByCode:   map[string]int{"unavailable": 10},
		CallsPerSec:   5000, SellingRatePerSec: 1250, AcceptedOrders: 10000, OrdersCommitted: 10000, Drained: true,
		P3Seconds: 6, DrainSeconds: 0, LoadEndAt: start.Add(20 * time.Second), LastAcceptedAt: start.Add(8 * time.Second),
		LastOrderAt: start.Add(14 * time.Second), OutboxUnpublishedAtLoadEnd: 0, OutboxDrained: true, RelayDrainSeconds: 0,
		LastPublishedAt: start.Add(16 * time.Second), PlaceP50Ms: 25, PlaceP99Ms: 120, MeasuredSeconds: 60,
		CPUSeconds:        map[string]float64{"service": 20, "redis": 5},
		CPUMicrosPerOrder: map[string]float64{"service": 2000, "redis": 500}, CPUMicrosPerOrderAll: 2500,
		Ceilings: Ceilings{Clients: 64, ReservePerSec: 30000, SendPerSec: 20000, MinPerSec: 20000, SellingRatio: 0.0625, CallsRatio: 0.25}}
	r.Invariants = []salekit.InvariantCheck{{ID: "I1", Name: "no oversell", Checked: true, Detail: "10000 live orders for 10000 units"},
		{ID: "I5", Name: "a paid order is never canceled", Detail: "not exercised"}}
	return r
}

// TestSaleReportRendersInChromium writes the report of a synthetic sale,
// renders it in a headless Chromium (installed by deploy/local/chromium.sh
// when missing) and checks the screenshot is a real picture and that every
// chart is in the rendered DOM with a drawn line.
func TestSaleReportRendersInChromium(t *testing.T) {
	dir := t.TempDir()
	jsonPath, htmlPath, err := writeSaleReport(dir, syntheticSaleResult())
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if b, err := os.ReadFile(jsonPath); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("result.json does not parse: %v", err)
	}
	if len(back.Series) != 120 || back.Summary.AcceptedOrders != 10000 {
		t.Fatalf("result.json lost data: %d samples, %d accepted orders", len(back.Series), back.Summary.AcceptedOrders)
	}
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"<script", "http://", "https://", "<link", "@import"} {
		if bytes.Contains(page, []byte(banned)) {
			t.Errorf("report.html is not self-contained: it holds %q", banned)
		}
	}

	browser := chromium.Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := "file://" + htmlPath
	shot := filepath.Join(dir, "report.png")
	headless := []string{"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + filepath.Join(dir, "profile")}
	cmd := exec.CommandContext(ctx, browser, append(headless, "--screenshot="+shot, "--window-size=1280,2400", url)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	checkScreenshot(t, shot)

	cmd = exec.CommandContext(ctx, browser, append(headless, "--dump-dom", url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	svgs := regexp.MustCompile(`(?s)<svg[^>]*data-plot="([^"]+)"[^>]*>(.*?)</svg>`).FindAllStringSubmatch(string(dom), -1)
	found := map[string]string{}
	for _, m := range svgs {
		found[m[1]] = m[2]
	}
	for _, name := range salePlots {
		body, ok := found[name]
		switch {
		case !ok:
			t.Errorf("the rendered DOM has no <svg data-plot=%q>", name)
		case !strings.Contains(body, "<polyline") && !strings.Contains(body, "<path"):
			t.Errorf("chart %q draws no line", name)
		}
	}
	if len(found) != len(salePlots) {
		t.Errorf("the DOM has %d charts, want %d: %v", len(found), len(salePlots), salePlots)
	}
}

// checkScreenshot checks that the PNG at path is about 1280x2400 and a
// real picture (many colors), not a blank page.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 2000 {
		t.Errorf("screenshot is %dx%d, want about 1280x2400", b.Dx(), b.Dy())
	}
	colors := map[uint32]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 3 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			colors[(r>>8)<<16|(g>>8)<<8|b>>8] = true
		}
	}
	if len(colors) < 16 {
		t.Errorf("screenshot has %d colors: the page did not render", len(colors))
	}
}

// TestSaleSummaryReportsTheRelay checks the summary's relay rows: the
// outbox rows left at the end of the load, whether the relay published
// every row, and the relay drain (or why there is none).
func TestSaleSummaryReportsTheRelay(t *testing.T) {
	r := syntheticSaleResult()
	r.Summary.OutboxUnpublishedAtLoadEnd, r.Summary.RelayDrainSeconds = 16050, 15.36
	var out bytes.Buffer
	writeSaleSummary(&out, r)
	for _, want := range []string{
		"outbox rows unpublished at the end of the load 16,050",
		"outbox drained (relay published every row)     yes",
		"relay drain: outbox empty - end of load        15.36 s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
	r.Summary.OutboxDrained, r.Summary.OutboxUnpublishedAtEnd = false, 1234
	out.Reset()
	writeSaleSummary(&out, r)
	for _, want := range []string{"NO (--settle ran out with 1,234 rows unpublished)", "relay drain: outbox empty - end of load        - (not drained)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary of an undrained outbox lacks %q:\n%s", want, out.String())
		}
	}
	b, err := json.Marshal(r.Summary)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"outbox_unpublished_at_load_end":16050`, `"relay_drain_seconds":15.36`, `"outbox_drained":false`, `"outbox_unpublished_at_end":1234`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("result.json's summary lacks %s: %s", key, b)
		}
	}
}
