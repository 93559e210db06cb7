package main

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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/seckill-dev/seckill/adapters/testkit/chromium"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// syntheticSaleResult is a sale of 60 seconds with made-up but plausible
// series: a burst that sells out at 8 s and a backlog that drains by
// 14 s.
func syntheticSaleResult() saleResult {
	start := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)
	procs := []string{"service", "load generator", "broker proxy", "namesrv", "redis", "postgres"}
	r := saleResult{Settings: saleOptions{Stock: 10000, Buyers: 50000, Attempts: 2, SameRequestShare: 0.5, Arrival: "burst",
		Clients: 256, Protocol: "connect", SettleSeconds: 120, CeilingClients: 64, CeilingCalls: 60000, Seed: 1},
		Command: "seckill-bench sale", Cores: 2, GoVersion: "go1.26.8", StartedAt: start, ActivityID: 42, Processes: procs}
	for i := 1; i <= 120; i++ {
		t := float64(i) / 2
		s := saleSample{T: t, Phase: "sale", CPUCores: map[string]float64{}}
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
	r.Summary = saleSummary{LoadSeconds: 20, SellingSeconds: 8, Answers: map[string]int64{saleload.Accepted: 10000,
		saleload.SoldOut: 86000, saleload.AlreadyPurchased: 3990, saleload.Other: 10},
		AnswersPerSec: map[string]float64{saleload.Accepted: 500, saleload.SoldOut: 4300, saleload.AlreadyPurchased: 199.5, saleload.Other: 0.5},
		OtherByCode:   map[string]int{"unavailable": 10},
		CallsPerSec:   5000, SellingRatePerSec: 1250, AcceptedOrders: 10000, OrdersCommitted: 10000, Drained: true,
		P3Seconds: 6, DrainSeconds: 0, LoadEndAt: start.Add(20 * time.Second), LastAcceptedAt: start.Add(8 * time.Second),
		LastOrderAt: start.Add(14 * time.Second), OutboxUnpublishedAtLoadEnd: 0, OutboxDrained: true, RelayDrainSeconds: 0,
		LastPublishedAt: start.Add(16 * time.Second), PlaceP50Ms: 25, PlaceP99Ms: 120, MeasuredSeconds: 60,
		CPUSeconds:        map[string]float64{"service": 20, "redis": 5},
		CPUMicrosPerOrder: map[string]float64{"service": 2000, "redis": 500}, CPUMicrosPerOrderAll: 2500,
		Ceilings: saleCeilings{Clients: 64, ReservePerSec: 30000, SendPerSec: 20000, MinPerSec: 20000, SellingRatio: 0.0625, CallsRatio: 0.25}}
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
	var back saleResult
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
	f, err := os.Open(shot)
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

// TestBenchSaleEndToEnd runs a small `seckill-bench sale` on the stack:
// it must exit 0, write a result.json that parses, report every checked
// invariant held and write the report.
func TestBenchSaleEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	bin := buildBinaries(t, ctx, tmp)
	out := filepath.Join(tmp, "out")
	cmd := exec.CommandContext(ctx, bin, "sale", "--stock", "200", "--buyers", "600", "--clients", "16",
		"--ceiling-calls", "3000", "--settle", "90s", "--out", out)
	cmd.Env = os.Environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("seckill-bench sale: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), tail(stderr.String(), 4000))
	}
	b, err := os.ReadFile(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r saleResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result.json does not parse: %v", err)
	}
	if r.Violations != 0 {
		t.Errorf("%d invariant violations:\n%s", r.Violations, stdout.String())
	}
	checked := map[string]bool{}
	for _, c := range r.Invariants {
		checked[c.ID] = c.Checked
		if c.Violations != 0 {
			t.Errorf("%s (%s): %d violations: %s", c.ID, c.Name, c.Violations, c.Detail)
		}
	}
	for _, id := range []string{"I1", "I2", "I3", "I6", "I7"} {
		if !checked[id] {
			t.Errorf("%s was not checked", id)
		}
	}
	s := r.Summary
	if !s.Drained || s.AcceptedOrders == 0 || int64(s.AcceptedOrders) > int64(r.Settings.Stock) {
		t.Errorf("drained %v, %d accepted orders for %d units", s.Drained, s.AcceptedOrders, r.Settings.Stock)
	}
	if calls := s.Answers[saleload.Accepted] + s.Answers[saleload.SoldOut] + s.Answers[saleload.AlreadyPurchased] + s.Answers[saleload.Other]; calls != 1200 {
		t.Errorf("%d answers, want 600 buyers x 2 attempts", calls)
	}
	if !s.OutboxDrained || s.RelayDrainSeconds < 0 || s.LastPublishedAt.IsZero() || s.OutboxUnpublishedAtEnd != 0 {
		t.Errorf("outbox drained %v, relay drain %.2f s, last published %v, %d rows left: the relay did not finish",
			s.OutboxDrained, s.RelayDrainSeconds, s.LastPublishedAt, s.OutboxUnpublishedAtEnd)
	}
	if s.OutboxUnpublishedAtLoadEnd < 0 || (s.OutboxUnpublishedAtLoadEnd > 0 && s.RelayDrainSeconds <= 0) {
		t.Errorf("%d outbox rows unpublished at the end of the load, relay drain %.2f s", s.OutboxUnpublishedAtLoadEnd, s.RelayDrainSeconds)
	}
	for _, row := range []string{"outbox rows unpublished at the end of the load", "outbox drained (relay published every row)",
		"relay drain: outbox empty - end of load"} {
		if !strings.Contains(stdout.String(), row) {
			t.Errorf("the summary has no row %q", row)
		}
	}
	if len(r.Series) == 0 {
		t.Error("no time series")
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
	t.Logf("\n%s", stdout.String())
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

// TestSaleJSONCodecWritesWhatProtojsonReads checks that the load
// generator's PlaceOrderRequest JSON reads back, through protojson, as the
// request it encodes, and that a request id needing escapes (or any other
// message) goes through protojson.
func TestSaleJSONCodecWritesWhatProtojsonReads(t *testing.T) {
	for _, req := range []*seckillv1.PlaceOrderRequest{
		{ActivityId: 1796159630439546, SkuId: 1, RequestId: "sale-49999-1"},
		{ActivityId: 7, SkuId: 9223372036854775807, RequestId: `a "quoted" \ id ü`},
		{ActivityId: 0, SkuId: 1, RequestId: "sale-0-0"},
	} {
		b, err := benchenv.SaleJSONCodec{}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		back := &seckillv1.PlaceOrderRequest{}
		if err := protojson.Unmarshal(b, back); err != nil {
			t.Fatalf("%s does not parse: %v", b, err)
		}
		if !proto.Equal(back, req) {
			t.Errorf("%s reads back as %v, want %v", b, back, req)
		}
	}
	res := &seckillv1.PlaceOrderResponse{OrderId: "o-1", Status: seckillv1.OrderStatus_ORDER_STATUS_QUEUING}
	b, err := benchenv.SaleJSONCodec{}.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	back := &seckillv1.PlaceOrderResponse{}
	if err := (benchenv.SaleJSONCodec{}).Unmarshal(append(b[:len(b)-1:len(b)-1], []byte(`,"unknownField":1}`)...), back); err != nil {
		t.Fatalf("an answer with an unknown field: %v", err)
	}
	if !proto.Equal(back, res) {
		t.Errorf("the answer reads back as %v, want %v", back, res)
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TestSaleProcessesReadPidFiles: the processes a sale meters are the
// service, the load generator and the broker's processes whose pid files
// (absolute paths, as of the RocketMQ cluster mode) exist; those without
// one, and the stack's redis and postgres when SECKILL_STACK_DIR has no
// pid file for them, are named in the note.
func TestSaleProcessesReadPidFiles(t *testing.T) {
	t.Setenv("SECKILL_STACK_DIR", t.TempDir())
	run := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, name := range []string{"proxy", "broker-a", "broker-b"} { // namesrv.pid missing
		if err := os.WriteFile(filepath.Join(run, name+".pid"), []byte(pid+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	broker := [][2]string{{"broker proxy", filepath.Join(run, "proxy.pid")}, {"broker-a", filepath.Join(run, "broker-a.pid")},
		{"broker-b", filepath.Join(run, "broker-b.pid")}, {"namesrv", filepath.Join(run, "namesrv.pid")}}
	procs, note := saleProcesses(1, broker)
	var names []string
	for _, p := range procs {
		names = append(names, p.Name)
		if p.Name == "broker-a" && p.PID != os.Getpid() {
			t.Errorf("broker-a pid %d, want %d", p.PID, os.Getpid())
		}
	}
	if !slices.Equal(names, []string{"service", "load generator", "broker proxy", "broker-a", "broker-b"}) ||
		note != "not measured (no pid file under $SECKILL_STACK_DIR/run, or not the process in use): namesrv, redis, postgres" {
		t.Fatalf("saleProcesses: %v; note %q", names, note)
	}
}
