package bootstrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/testkit/chromium"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// TestStatusPage starts the service, sells two activities while the
// status page is being read, then renders /status in a headless Chromium
// (installed by deploy/local/chromium.sh when missing; the test fails if
// it cannot be): the screenshot must be a real picture, and the stock
// figures in the rendered DOM and in /status.json must equal the admin
// API's stock reports at rest. Set SECKILL_STATUS_SCREENSHOT to a path to
// keep the screenshot (docs/status.png is one).
func TestStatusPage(t *testing.T) {
	s := startSystem(t, options{configure: func(c *config.Config) {
		readRocketMQExporter(t, c)
	}})
	const open, soldOut = 31, 32
	s.activity(open, 40, 10*time.Minute, time.Minute)
	s.activity(soldOut, 5, 10*time.Minute, time.Minute)
	ops := "http://" + s.app.OpsAddr().String()

	// Read both forms of the page while orders are placed.
	stop := make(chan struct{})
	var (
		readers sync.WaitGroup
		mu      sync.Mutex
		reads   int
		readErr error
	)
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, path := range []string{"/status", "/status.json"} {
				if _, err := fetchStatus(ops + path); err != nil {
					mu.Lock()
					readErr = err
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			reads++
			mu.Unlock()
		}
	}()
	accepted := map[int64]int{}
	for i := range 12 {
		for _, act := range []int64{open, soldOut} {
			user := int64(5000 + i)
			_, err := s.place(context.Background(), user, act, fmt.Sprintf("status-%d-%d", act, user))
			switch {
			case err == nil:
				accepted[act]++
			case act == soldOut && api.ErrorReason(err) == "SOLD_OUT":
			default:
				t.Fatalf("place order %d for user %d: %v", act, user, err)
			}
		}
	}
	close(stop)
	readers.Wait()
	if readErr != nil {
		t.Fatalf("reading the status page during the sale: %v", readErr)
	}
	if reads == 0 {
		t.Fatal("the status page was never read during the sale")
	}
	if accepted[open] != 12 || accepted[soldOut] != 5 {
		t.Fatalf("accepted %v, want 12 of activity %d and 5 of activity %d", accepted, open, soldOut)
	}
	t.Logf("the page was read %d times during the sale", reads)

	reports := map[int64]*seckillv1.StockReport{open: s.settled(open, 60*time.Second), soldOut: s.settled(soldOut, 60*time.Second)}

	page, err := fetchStatus(ops + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, banned := range []string{"<script", "http://", "https://", "<link", "@import", "url("} {
		if bytes.Contains(page, []byte(banned)) {
			t.Errorf("/status is not self-contained: it holds %q", banned)
		}
	}
	if !bytes.Contains(page, []byte(`<meta http-equiv="refresh" content="2">`)) {
		t.Error("/status does not refresh itself every 2 s")
	}
	checkStatusJSON(t, ops+"/status.json", reports)
	// The lag table is filled from the broker's exporter, which learns a
	// new consumer group on its own schedule: wait (bounded) until the page
	// has the group's row before the browser renders it.
	group := s.broker.Prefix() + "CG_SECKILL_ORDER_CREATE_PG_V1"
	s.eventually(60*time.Second, "the lag table has the order-create group", func() bool {
		page, err := fetchStatus(ops + "/status")
		return err == nil && bytes.Contains(page, []byte(`<tr data-group="`+group+`">`))
	})

	browser := chromium.Path(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	headless := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(dir, "profile")}
	shot := filepath.Join(dir, "status.png")
	cmd := exec.CommandContext(ctx, browser, append(headless, "--screenshot="+shot, "--window-size=1200,900", ops+"/status")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	checkScreenshot(t, shot)
	if keep := os.Getenv("SECKILL_STATUS_SCREENSHOT"); keep != "" {
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keep, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cmd = exec.CommandContext(ctx, browser, append(headless, "--dump-dom", ops+"/status")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	checkStatusDOM(t, string(dom), reports, group)
}

// fetchStatus GETs url and returns the body of a 200 answer.
func fetchStatus(url string) ([]byte, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", url, res.StatusCode, body)
	}
	if strings.HasSuffix(url, ".json") {
		var st bootstrap.Status
		if err := json.Unmarshal(body, &st); err != nil {
			return nil, fmt.Errorf("GET %s: %w", url, err)
		}
	}
	return body, nil
}

// checkStatusJSON checks /status.json at rest: every section without an
// error and each activity's row equal to its stock report.
func checkStatusJSON(t *testing.T, url string, reports map[int64]*seckillv1.StockReport) {
	t.Helper()
	body, err := fetchStatus(url)
	if err != nil {
		t.Fatal(err)
	}
	var st bootstrap.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	for name, msg := range map[string]string{"activities": st.Activities.Error, "backlog": st.Backlog.Error,
		"consumers": st.Consumers.Error, "dead letters": st.DeadLetters.Error, "publisher": st.Publisher.Error,
		"build": st.Build.Error} {
		if msg != "" {
			t.Errorf("/status.json: the %s section has an error: %s", name, msg)
		}
	}
	rows := map[int64]bootstrap.StockRow{}
	for _, r := range st.Activities.Rows {
		rows[r.ActivityID] = r
	}
	for id, rep := range reports {
		r, ok := rows[id]
		if !ok {
			t.Errorf("/status.json has no row for activity %d: %s", id, body)
			continue
		}
		got := []int64{r.InitialStock, r.RedisAvailable, r.PendingReservations, r.Orders, r.PGFinalStock, r.ReleasesInFlight, r.Drift}
		want := []int64{rep.GetInitialStock(), rep.GetRedisAvailable(), rep.GetPendingReservations(), rep.GetNonCanceledOrders(),
			rep.GetPgFinalStock(), rep.GetReleasesInFlight(), rep.GetDrift()}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("/status.json activity %d: %v, the admin API says %v", id, got, want)
		}
		if !r.AdmissionOpen {
			t.Errorf("/status.json: admission closed for activity %d at rest: %s", id, r.AdmissionDetail)
		}
	}
	if st.Build.GoVersion == "" || st.At.IsZero() {
		t.Errorf("/status.json: no build or snapshot time: %+v, %v", st.Build, st.At)
	}
	if len(st.Publisher.Breakers) == 0 || st.Publisher.Breakers[0].Name != "closed" {
		t.Errorf("/status.json: breakers %+v, want one closed", st.Publisher.Breakers)
	}
}

// TestStatusJSONOnEveryBroker reads /status.json of a service on each
// broker after an order settled: every section without an error, the
// order-create group's in-flight figure (every adapter exports it), no
// unresolved reservation, and the publisher's breakers as the adapter has
// them (RocketMQ one per endpoint, closed; the others none, which is not
// an error).
func TestStatusJSONOnEveryBroker(t *testing.T) {
	forEachBroker(t, func(t *testing.T, broker string) {
		s := startSystem(t, options{broker: broker})
		const act = 33
		s.activity(act, 5, 10*time.Minute, time.Minute)
		if _, err := s.place(context.Background(), 5100, act, "status-every-broker"); err != nil {
			t.Fatal(err)
		}
		s.settled(act, 60*time.Second)
		st, err := fetchStatusJSON("http://" + s.app.OpsAddr().String() + "/status.json")
		if err != nil {
			t.Fatal(err)
		}
		for name, msg := range map[string]string{"activities": st.Activities.Error, "backlog": st.Backlog.Error,
			"consumers": st.Consumers.Error, "dead letters": st.DeadLetters.Error, "publisher": st.Publisher.Error,
			"build": st.Build.Error} {
			if msg != "" {
				t.Errorf("the %s section has an error: %s", name, msg)
			}
		}
		group := s.broker.Prefix() + "CG_SECKILL_ORDER_CREATE_PG_V1"
		i := slices.IndexFunc(st.Consumers.Groups, func(r bootstrap.ConsumerRow) bool { return r.Group == group })
		if i < 0 || st.Consumers.Groups[i].Inflight == nil || *st.Consumers.Groups[i].Inflight != 0 {
			t.Errorf("consumer rows %+v: want %s with 0 in flight at rest", st.Consumers.Groups, group)
		}
		// The gate measures every 250 ms: its count reaches 0 at its first
		// measurement after the order settled.
		s.eventually(10*time.Second, "the page shows no unresolved reservation", func() bool {
			st, err := fetchStatusJSON("http://" + s.app.OpsAddr().String() + "/status.json")
			return err == nil && st.Backlog.Unresolved != nil && *st.Backlog.Unresolved == 0
		})
		switch broker {
		case "rocketmq":
			if len(st.Publisher.Breakers) == 0 || st.Publisher.Breakers[0].Name != "closed" || st.Publisher.SendTimeoutSeconds == nil {
				t.Errorf("publisher %+v: want closed breakers and a send timeout", st.Publisher)
			}
		default:
			if len(st.Publisher.Breakers) != 0 {
				t.Errorf("publisher %+v: want no breaker", st.Publisher)
			}
		}
	})
}

// fetchStatusJSON GETs url and decodes the snapshot.
func fetchStatusJSON(url string) (bootstrap.Status, error) {
	var st bootstrap.Status
	body, err := fetchStatus(url)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("decode %s: %w", url, err)
	}
	return st, nil
}

// checkScreenshot checks that path is a PNG of about 1200x900 with a
// rendered page in it.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || fi.Size() == 0 {
		t.Fatalf("empty screenshot: %v", err)
	}
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dx() > 2400 || b.Dy() < 700 || b.Dy() > 1800 {
		t.Errorf("screenshot is %dx%d, want about 1200x900", b.Dx(), b.Dy())
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

var (
	activityRow = regexp.MustCompile(`(?s)<tr data-activity="(\d+)/(\d+)">(.*?)</tr>`)
	fieldCell   = regexp.MustCompile(`<td data-field="(\w+)"[^>]*>(-?\d+)</td>`)
)

// checkStatusDOM checks the rendered page: one row per activity whose
// figures equal the admin API's stock report, and a lag row of group.
func checkStatusDOM(t *testing.T, dom string, reports map[int64]*seckillv1.StockReport, group string) {
	t.Helper()
	rows := map[int64]map[string]int64{}
	for _, m := range activityRow.FindAllStringSubmatch(dom, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		fields := map[string]int64{}
		for _, c := range fieldCell.FindAllStringSubmatch(m[3], -1) {
			fields[c[1]], _ = strconv.ParseInt(c[2], 10, 64)
		}
		rows[id] = fields
	}
	for id, rep := range reports {
		f, ok := rows[id]
		if !ok {
			t.Errorf("the rendered page has no row for activity %d:\n%s", id, dom)
			continue
		}
		for name, want := range map[string]int64{"initial_stock": rep.GetInitialStock(), "orders": rep.GetNonCanceledOrders(),
			"drift": rep.GetDrift(), "redis_available": rep.GetRedisAvailable(),
			"pending_reservations": rep.GetPendingReservations(), "pg_final_stock": rep.GetPgFinalStock(),
			"releases_in_flight": rep.GetReleasesInFlight()} {
			got, ok := f[name]
			if !ok || got != want {
				t.Errorf("activity %d: the page shows %s = %d (present %v), the admin API says %d", id, name, got, ok, want)
			}
		}
	}
	if !strings.Contains(dom, `<tr data-group="`+group+`">`) {
		t.Errorf("the lag table has no row for %s:\n%s", group, dom)
	}
	for _, want := range []string{`id="snapshot-at"`, `data-breaker="`, "seckill status"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
}

// TestStatusActivityStates checks the activity section of /status.json and
// /status with an activity SKU in each state: on sale, sold out, paused,
// closed (ended) and scheduled (which also shows when it starts), the
// started ones before the scheduled one; this instance's accepted
// reservations per second and PlaceOrder p99 are > 0 after orders, as are
// the orders per second while orders are being created; drift is 0 at
// rest.
func TestStatusActivityStates(t *testing.T) {
	s := startSystem(t, options{})
	const onSale, soldOut, paused, closed, scheduled = 61, 62, 63, 64, 65
	s.activity(onSale, 40, 10*time.Minute, time.Minute)
	s.activity(soldOut, 2, 10*time.Minute, time.Minute)
	s.activity(paused, 5, 10*time.Minute, time.Minute)
	s.activity(closed, 5, 10*time.Minute, time.Minute)
	ctx := context.Background()
	adm := s.token(1, true)
	now := time.Now()
	if _, err := s.admin.CreateActivity(ctx, authed(&seckillv1.CreateActivityRequest{
		ActivityId: scheduled, SkuId: 1, Stock: 5,
		StartsAt: tsOf(now.Add(5 * time.Minute)), EndsAt: tsOf(now.Add(time.Hour)),
		PaymentTimeout: durOf(10 * time.Minute), ReservationTtl: durOf(time.Minute),
	}, adm)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.PauseActivity(ctx, authed(&seckillv1.PauseActivityRequest{ActivityId: paused, SkuId: 1}, adm)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.CloseActivity(ctx, authed(&seckillv1.CloseActivityRequest{ActivityId: closed, SkuId: 1}, adm)); err != nil {
		t.Fatal(err)
	}
	ops := "http://" + s.app.OpsAddr().String()
	// A snapshot before any order: the first orders sample.
	statusRows(t, ops)

	user := int64(7000)
	buy := func(act int64) error {
		user++
		_, err := s.place(ctx, user, act, fmt.Sprintf("states-%d-%d", act, user))
		return err
	}
	for range 6 {
		if err := buy(onSale); err != nil {
			t.Fatalf("place an order of activity %d: %v", onSale, err)
		}
	}
	for i := range 3 {
		err := buy(soldOut)
		if i < 2 && err != nil {
			t.Fatalf("place an order of activity %d: %v", soldOut, err)
		}
		if i == 2 && api.ErrorReason(err) != "SOLD_OUT" {
			t.Fatalf("the third order of activity %d (stock 2): %v, want SOLD_OUT", soldOut, err)
		}
	}
	if err := buy(paused); api.ErrorReason(err) != "ACTIVITY_PAUSED" {
		t.Fatalf("an order of the paused activity: %v, want ACTIVITY_PAUSED", err)
	}

	rows := statusRows(t, ops)
	r := rows[onSale]
	if r.PlaceOrderCalls < 6 || r.AcceptedPerSecond <= 0 || r.PlaceOrderP99Seconds <= 0 {
		t.Errorf("activity %d after 6 orders: %d calls, %v accepted/s, p99 %vs; want them all > 0", onSale,
			r.PlaceOrderCalls, r.AcceptedPerSecond, r.PlaceOrderP99Seconds)
	}
	if r := rows[paused]; r.AcceptedPerSecond != 0 || r.PlaceOrderCalls != 1 {
		t.Errorf("the paused activity: %d calls, %v accepted/s; want 1 call, none accepted", r.PlaceOrderCalls, r.AcceptedPerSecond)
	}
	if r := rows[scheduled]; r.PlaceOrderCalls != 0 || r.PlaceOrderP99Seconds != 0 {
		t.Errorf("the scheduled activity has PlaceOrder figures: %+v", r)
	}
	// Orders per second: the orders grow between snapshots while more are
	// placed (bounded), until a snapshot shows a positive rate.
	more := 0
	s.eventually(60*time.Second, "orders per second > 0", func() bool {
		if v := statusRows(t, ops)[onSale].OrdersPerSecond; v != nil && *v > 0 {
			return true
		}
		if more < 20 {
			more++
			if err := buy(onSale); err != nil {
				t.Errorf("place an order of activity %d: %v", onSale, err)
			}
		}
		return false
	})

	for _, id := range []int64{onSale, soldOut} {
		s.settled(id, 60*time.Second)
	}
	rows = statusRows(t, ops)
	want := map[int64]ports.ActivityState{onSale: ports.ActivityOnSale, soldOut: ports.ActivitySoldOut,
		paused: ports.ActivityPaused, closed: ports.ActivityEnded, scheduled: ports.ActivityScheduled}
	for id, state := range want {
		r, ok := rows[id]
		switch {
		case !ok:
			t.Errorf("/status.json has no row for activity %d", id)
		case r.State != state:
			t.Errorf("activity %d: state %s, want %s", id, r.State, state)
		case r.Error != "":
			t.Errorf("activity %d: %s", id, r.Error)
		case r.Drift != 0:
			t.Errorf("activity %d: drift %d at rest", id, r.Drift)
		}
	}
	if r := rows[scheduled]; r.OnSale || r.StartsInSeconds <= 0 {
		t.Errorf("the scheduled activity: on sale %v, starts in %vs", r.OnSale, r.StartsInSeconds)
	}
	if r := rows[paused]; !r.OnSale || !r.Paused {
		t.Errorf("the paused activity: on sale %v, paused %v", r.OnSale, r.Paused)
	}
	if r := rows[closed]; r.OnSale || r.ClosedAt.IsZero() {
		t.Errorf("the closed activity: on sale %v, closed at %v", r.OnSale, r.ClosedAt)
	}

	page, err := fetchStatus(ops + "/status")
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for id, state := range map[int64]string{onSale: `class="state st-onsale" data-state="ON_SALE">ON SALE<`,
		soldOut: `class="state st-soldout" data-state="SOLD_OUT">SOLD OUT<`, paused: `class="state st-paused" data-state="PAUSED">PAUSED<`,
		closed: `class="state st-ended" data-state="ENDED">ENDED<`, scheduled: `class="state st-scheduled" data-state="SCHEDULED">SCHEDULED<`} {
		m := regexp.MustCompile(`(?s)<tr data-activity="` + strconv.FormatInt(id, 10) + `/1">(.*?)</tr>`).FindStringSubmatch(html)
		switch {
		case m == nil:
			t.Errorf("/status has no row for activity %d", id)
		case !strings.Contains(m[1], state):
			t.Errorf("/status row of activity %d lacks %q:\n%s", id, state, m[1])
		case !strings.Contains(m[1], `<td data-field="drift" class="ok">0</td>`):
			t.Errorf("/status row of activity %d has no drift 0 in green:\n%s", id, m[1])
		}
		if id == scheduled && (m == nil || !strings.Contains(m[1], "starts in ")) {
			t.Errorf("/status does not say when activity %d starts", id)
		}
	}
	if strings.Index(html, `data-activity="`+strconv.Itoa(scheduled)+`/1"`) < strings.Index(html, `data-activity="`+strconv.Itoa(closed)+`/1"`) {
		t.Error("/status lists the scheduled activity before a started one")
	}
}

// statusRows fetches /status.json and returns its activity rows by
// activity id; the section must have no error.
func statusRows(t *testing.T, ops string) map[int64]bootstrap.StockRow {
	t.Helper()
	body, err := fetchStatus(ops + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var st bootstrap.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.Activities.Error != "" || st.Activities.RateWindowSeconds <= 0 {
		t.Fatalf("/status.json activities: error %q, rate window %vs", st.Activities.Error, st.Activities.RateWindowSeconds)
	}
	rows := map[int64]bootstrap.StockRow{}
	for _, r := range st.Activities.Rows {
		rows[r.ActivityID] = r
	}
	return rows
}
