package chaos

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/tools/internal/runreport"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// soakSample is one sample of the resources: those of the second service
// instance (which no fault kills or pauses, so its process lives the whole
// soak), PostgreSQL connections to the scratch database and the Redis
// server's memory.
type soakSample struct {
	T          float64 `json:"t"`
	RSSMiB     float64 `json:"rss_mib"`
	Goroutines float64 `json:"goroutines"`
	OpenFiles  float64 `json:"open_files"`
	PGConns    float64 `json:"pg_connections"`
	RedisMiB   float64 `json:"redis_used_memory_mib"`
	RedisKeys  float64 `json:"redis_keys"`
	// RedisPersistent are the keys with no expiry (INFO keyspace: keys
	// minus expires): what grows without bound if anything does.
	RedisPersistent float64 `json:"redis_keys_without_expiry"`
}

// sample takes a sample every o.sampleEvery until ctx ends.
func (s *soak) sample(ctx context.Context) {
	t := time.NewTicker(s.o.sampleEvery)
	defer t.Stop()
	for {
		if smp, err := s.takeSample(ctx); err == nil {
			s.mu.Lock()
			s.res.Samples = append(s.res.Samples, smp)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *soak) takeSample(ctx context.Context) (soakSample, error) {
	smp := soakSample{T: s.since(time.Now())}
	in := s.rig.instances[1]
	g, err := salekit.ScrapeGauges(ctx, s.rig.httpc, "http://"+in.Ops+"/metrics", "go_goroutines", "process_resident_memory_bytes", "process_open_fds")
	if err != nil {
		return smp, err
	}
	smp.Goroutines, smp.RSSMiB, smp.OpenFiles = g["go_goroutines"], g["process_resident_memory_bytes"]/(1<<20), g["process_open_fds"]
	if err := s.rig.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&smp.PGConns); err != nil {
		return smp, err
	}
	if smp.RedisKeys, smp.RedisPersistent, err = redisKeyCounts(ctx, s.rig); err != nil {
		return smp, err
	}
	info, err := s.rig.redisDB.Info(ctx, "memory").Result()
	if err != nil {
		return smp, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			b, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return smp, err
			}
			smp.RedisMiB = b / (1 << 20)
		}
	}
	return smp, nil
}

// redisKeyCounts reads the soak Redis' keys and those without an expiry
// (INFO keyspace, database 0).
func redisKeyCounts(ctx context.Context, rig *soakRig) (keys, persistent float64, err error) {
	info, err := rig.redisDB.Info(ctx, "keyspace").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "db0:")
		if !ok {
			continue
		}
		var expires float64
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "keys":
				keys = n
			case "expires":
				expires = n
			}
		}
		return keys, keys - expires, nil
	}
	return 0, 0, nil // an empty database has no db0 line
}

// Trend verdicts.
const (
	trendFlat  = "flat"
	trendGrows = "grows"
	TrendShort = "too short to tell"
)

// soakTrend is one resource over the soak after the warm-up: the slope
// of a least-squares line, and the medians of the middle and the last
// third of the samples. It grows when the last third's median is more
// than 10 % and more than floor above the middle third's.
type soakTrend struct {
	Name         string  `json:"name"`
	Unit         string  `json:"unit"`
	Samples      int     `json:"samples"`
	SlopePerHour float64 `json:"slope_per_hour"`
	MiddleMedian float64 `json:"middle_third_median"`
	LastMedian   float64 `json:"last_third_median"`
	Verdict      string  `json:"verdict"`
	Detail       string  `json:"detail"`
}

// soakMeasure is one resource the soak follows.
type soakMeasure struct {
	name, unit string
	floor      float64
	get        func(soakSample) float64
}

var SoakMeasures = []soakMeasure{
	{"service RSS", "MiB", 16, func(s soakSample) float64 { return s.RSSMiB }},
	{"service goroutines", "goroutines", 50, func(s soakSample) float64 { return s.Goroutines }},
	{"service open files", "files", 16, func(s soakSample) float64 { return s.OpenFiles }},
	{"PostgreSQL connections", "connections", 4, func(s soakSample) float64 { return s.PGConns }},
	{"Redis used memory", "MiB", 1, func(s soakSample) float64 { return s.RedisMiB }},
	{"Redis keys", "keys", 1000, func(s soakSample) float64 { return s.RedisKeys }},
	{"Redis keys without expiry", "keys", 1000, func(s soakSample) float64 { return s.RedisPersistent }},
}

// minTrendSpan is the least time the samples after the warm-up must
// span for a verdict: a short run (make test's) sees every sale add its
// keys and tells nothing of a trend.
const minTrendSpan = 20 * time.Minute

// soakTrends computes the trend of every measure over the samples taken
// after warmup seconds (at least 12 spanning minTrendSpan, or the verdict
// is trendShort).
func soakTrends(samples []soakSample, warmup float64) []soakTrend {
	var after []soakSample
	for _, s := range samples {
		if s.T >= warmup {
			after = append(after, s)
		}
	}
	var out []soakTrend
	for _, m := range SoakMeasures {
		t := soakTrend{Name: m.name, Unit: m.unit, Samples: len(after), Verdict: TrendShort}
		if len(after) >= 12 && after[len(after)-1].T-after[0].T >= minTrendSpan.Seconds() {
			xs, ys := make([]float64, len(after)), make([]float64, len(after))
			for i, s := range after {
				xs[i], ys[i] = s.T, m.get(s)
			}
			n := len(ys)
			t.SlopePerHour = slope(xs, ys) * 3600
			t.MiddleMedian, t.LastMedian = salekit.Median(ys[n/3:2*n/3]), salekit.Median(ys[2*n/3:])
			t.Verdict = trendFlat
			if t.LastMedian > 1.1*t.MiddleMedian && t.LastMedian-t.MiddleMedian > m.floor {
				t.Verdict = trendGrows
			}
		}
		t.Detail = fmt.Sprintf("median %s in the middle third, %s in the last; slope %+.3g %s/h over %d samples",
			runreport.TickLabel(t.MiddleMedian), runreport.TickLabel(t.LastMedian), t.SlopePerHour, m.unit, t.Samples)
		out = append(out, t)
	}
	return out
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// writeTrends prints the trends table.
func writeTrends(w io.Writer, trends []soakTrend) {
	fmt.Fprintf(w, "\n%-24s %-16s %s\n", "resource", "verdict", "detail")
	for _, t := range trends {
		fmt.Fprintf(w, "%-24s %-16s %s\n", t.Name, t.Verdict, t.Detail)
	}
}

// newSoakPage is the soak's report.html: the faults, the activities, the
// invariants over every activity and one chart per resource with the
// faults marked.
func newSoakPage(r SoakResult) runreport.Page {
	p := runreport.Page{Title: "seckill-bench chaos soak",
		Subtitle: fmt.Sprintf("%s; broker %s; Redis retentions %s; %d cores, %s; started %s", r.Duration, r.Broker, r.Retention,
			r.Cores, r.GoVersion, r.StartedAt.UTC().Format(time.RFC3339)),
		Command: r.Command, Invariants: soakInvariants(r.Activities), Violations: r.Violations}
	for _, f := range r.Faults {
		v := fmt.Sprintf("back at %.0f s, recovery %.1f s", f.BackAtS, f.RecoveryS)
		if f.Error != "" {
			v = "error: " + f.Error
		}
		p.Rows = append(p.Rows, [2]string{fmt.Sprintf("fault at %.0f s: %s", f.AtS, f.Name), v})
	}
	for _, a := range r.Activities {
		v := fmt.Sprintf("%d acknowledged, %d paid, %d canceled (%d by their buyer), at rest after %.0f s, %d violations %s",
			a.Acknowledged, a.Paid, a.Canceled, a.BuyerCancels, a.RestS, a.Violations, a.Error)
		name := fmt.Sprintf("activity %d from %.0f s", a.ID, a.StartedAtS)
		if a.Probe {
			name = fmt.Sprintf("recovery probe's activity %d", a.ID)
		}
		p.Rows = append(p.Rows, [2]string{name, v})
	}
	for _, t := range r.Trends {
		p.Rows = append(p.Rows, [2]string{t.Name, t.Verdict + ": " + t.Detail})
	}
	var markers []runreport.Marker
	for _, f := range r.Faults {
		markers = append(markers, runreport.Marker{X: f.AtS, Label: f.Name})
	}
	xs := make([]float64, len(r.Samples))
	for i, s := range r.Samples {
		xs[i] = s.T
	}
	for _, m := range SoakMeasures {
		ys := make([]float64, len(r.Samples))
		for i, s := range r.Samples {
			ys[i] = m.get(s)
		}
		c := runreport.Plot{Name: strings.ReplaceAll(m.name, " ", "-"), Title: m.name, Unit: m.unit,
			Lines: []runreport.Line{{Name: m.name, X: xs, Y: ys}}, Markers: markers}
		p.Charts = append(p.Charts, runreport.Chart{Name: c.Name, Title: c.Title, Caption: c.Unit, SVG: template.HTML(c.SVG())}) //nolint:gosec // our own SVG
	}
	p.Notes = append(p.Notes,
		"Recovery: from the moment the faulted component was back (restarted, resumed, connections passed again) until the first order placed after it was created in PostgreSQL (orders.created_at), by a probe buying on an activity of its own.",
		"Resources of the second service instance (no fault kills or pauses it) from its /metrics; PostgreSQL connections to the soak's database (pg_stat_activity, this tool's own pool of at most 4 included); Redis INFO used_memory and keyspace (keys, and keys without an expiry; the soak has a Redis of its own).",
		"A resource grows when the median of the last third of its samples after the warm-up is more than 10 % and more than a floor above the middle third's.")
	return p
}

// soakInvariants folds every activity's checks into one row per
// invariant: the violations summed, and the activities checked.
func soakInvariants(acts []soakActivity) []salekit.InvariantCheck {
	var out []salekit.InvariantCheck
	index := map[string]int{}
	checked := map[string]int{}
	for _, a := range acts {
		for _, c := range a.Invariants {
			i, ok := index[c.ID]
			if !ok {
				i = len(out)
				index[c.ID] = i
				out = append(out, salekit.InvariantCheck{ID: c.ID, Name: c.Name, Checked: c.Checked})
			}
			out[i].Violations += c.Violations
			if c.Checked {
				checked[c.ID]++
			}
		}
	}
	for i := range out {
		out[i].Detail = fmt.Sprintf("checked on %d of %d activities at rest", checked[out[i].ID], len(acts))
	}
	return out
}
