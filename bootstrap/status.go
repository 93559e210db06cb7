package bootstrap

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/adapters/metrics"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
)

// Limits of one status snapshot.
const (
	// statusTimeout bounds building one snapshot, every section included.
	statusTimeout = 2 * time.Second
	// statusMaxActivities bounds the activity SKUs that get a stock
	// report (one each); the others are counted, not shown.
	statusMaxActivities = 50
	// statusReportWorkers is how many stock reports run at once.
	statusReportWorkers = 4
	// statusRecentlyEnded keeps an activity SKU on the page this long
	// after its sale ended, while its last reservations settle.
	statusRecentlyEnded = 15 * time.Minute
	// statusOrderSamples bounds the orders samples kept per activity SKU
	// for its orders per second (one per snapshot, within
	// application.SaleRateWindow).
	statusOrderSamples = 16
)

// StatusPage serves the live status page of the operations listener:
// GET /status, an HTML page that refreshes itself every 2 s and needs
// nothing from elsewhere (no script, style sheet or font), and GET
// /status.json, the same snapshot as JSON. A snapshot holds the stock
// books (I6) of every activity SKU on sale, the backlog gate, consumer lag
// per group, open dead letters, the publisher's circuit breaker and send
// timeout, and the build (docs/status.md says where each number comes
// from). Building one is bounded by statusTimeout; a section that fails
// shows its error and the others still show. Concurrent requests share the
// snapshot being built, so any number of open pages cost one snapshot at a
// time.
type StatusPage struct {
	admin       *application.Admin
	gate        *application.BacklogGate
	deadLetters *application.DeadLetters
	uow         ports.UnitOfWork
	messaging   ports.MessagingStatus
	rates       *application.SaleRates
	limits      *application.ConsumerLimits // nil with the fixed limiter
	clock       ports.Clock
	instance    string
	buildInfo   StatusBuild
	tmpl        *template.Template
	log         *slog.Logger

	mu      sync.Mutex
	pending *statusCall // the snapshot being built, nil when none

	messagingMu sync.Mutex
	// lastMessaging is the last messaging snapshot read in full, and
	// lastMessagingAt when (zero before the first): shown, with its age,
	// when a later read does not finish within statusTimeout.
	lastMessaging   ports.MessagingSnapshot
	lastMessagingAt time.Time

	samplesMu sync.Mutex
	// samples are the orders counts of the shown activity SKUs at the
	// last snapshots, oldest first (see ordersPerSecond).
	samples map[activitySKU][]orderSample
}

// activitySKU identifies an activity SKU.
type activitySKU struct{ activityID, skuID int64 }

// orderSample is an activity SKU's non-canceled orders at a snapshot.
type orderSample struct {
	at     time.Time
	orders int64
}

// statusCall is one snapshot being built; done closes when st is set.
type statusCall struct {
	done chan struct{}
	st   Status
}

// provideStatusPage builds the status page mounted on the operations
// listener (provideOpsServer).
func provideStatusPage(cfg config.Config, admin *application.Admin, gate *application.BacklogGate,
	dl *application.DeadLetters, uow ports.UnitOfWork, messaging ports.MessagingStatus, rates *application.SaleRates,
	limits *application.ConsumerLimits, clock ports.Clock, log *slog.Logger) (*StatusPage, error) {
	b := metrics.ReadBuildInfo()
	return NewStatusPage(cfg.InstanceID, StatusBuild{Version: b.Version, Revision: b.Revision, Modified: b.Modified, GoVersion: b.GoVersion},
		StatusSources{Admin: admin, Gate: gate, DeadLetters: dl, Activities: uow, Messaging: messaging, Rates: rates, Limits: limits},
		clock, log)
}

// StatusSources are the ports and services a status page reads; it reads
// nothing else (no metric registry).
type StatusSources struct {
	// Admin takes the stock reports.
	Admin *application.Admin
	// Gate is the backlog gate whose last measurement is shown.
	Gate *application.BacklogGate
	// DeadLetters counts the open dead letters.
	DeadLetters *application.DeadLetters
	// Activities lists the activities.
	Activities ports.UnitOfWork
	// Messaging reports the consumer groups, breakers and send timeout.
	Messaging ports.MessagingStatus
	// Rates is the recorder PlaceOrder writes to (nil shows no rates).
	Rates *application.SaleRates
	// Limits are the adaptive consumer limits (nil with the fixed
	// limiter: none shown).
	Limits *application.ConsumerLimits
}

// NewStatusPage returns the status page of instance, running build, reading
// src.
func NewStatusPage(instance string, build StatusBuild, src StatusSources, clock ports.Clock, log *slog.Logger) (*StatusPage, error) {
	tmpl, err := statusTemplate()
	if err != nil {
		return nil, err
	}
	return &StatusPage{admin: src.Admin, gate: src.Gate, deadLetters: src.DeadLetters, uow: src.Activities, messaging: src.Messaging,
		rates: src.Rates, limits: src.Limits, clock: clock, instance: instance, buildInfo: build, tmpl: tmpl,
		log: log.With("component", "status"), samples: map[activitySKU][]orderSample{}}, nil
}

// Status is one snapshot of the status page.
type Status struct {
	Instance    string            `json:"instance"`
	At          time.Time         `json:"at"`
	Build       StatusBuild       `json:"build"`
	Activities  StatusActivities  `json:"activities"`
	Backlog     StatusBacklog     `json:"backlog"`
	Consumers   StatusConsumers   `json:"consumers"`
	DeadLetters StatusDeadLetters `json:"dead_letters"`
	Publisher   StatusPublisher   `json:"publisher"`
}

// StatusBuild names the running build (the labels of seckill_build_info).
type StatusBuild struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Modified  string `json:"modified"`
	GoVersion string `json:"go_version"`
	Error     string `json:"error,omitempty"`
}

// StatusActivities are the stock books of the activity SKUs whose sale
// is scheduled, running, or ended less than 15 minutes ago, each with its
// state and this instance's rates.
type StatusActivities struct {
	Rows []StockRow `json:"rows"`
	// RateWindowSeconds is the window of the rows' rates
	// (application.SaleRateWindow).
	RateWindowSeconds float64 `json:"rate_window_seconds"`
	// Omitted counts the activity SKUs selected but not shown (beyond
	// the first 50).
	Omitted int    `json:"omitted"`
	Error   string `json:"error,omitempty"`
}

// StockRow is one activity SKU: its settings, its state, the terms of I6
// as Admin.GetStockReport returns them and its rates.
type StockRow struct {
	ActivityID int64 `json:"activity_id"`
	SKUID      int64 `json:"sku_id"`
	// State is the activity SKU's state at the snapshot, with the
	// precedence of ports.ActivityState: ENDED (closed, or ends_at
	// passed), SCHEDULED (starts_at ahead), PAUSED, SOLD_OUT (Redis
	// available 0 in the stock report), else ON_SALE.
	State ports.ActivityState `json:"state"`
	// OnSale: the snapshot is within the sale's window and the sale is
	// not closed (the state is ON_SALE, PAUSED or SOLD_OUT).
	OnSale bool `json:"on_sale"`
	// Paused and ClosedAt are the operators' switches as stored.
	Paused   bool      `json:"paused"`
	ClosedAt time.Time `json:"closed_at,omitzero"`
	StartsAt time.Time `json:"starts_at"`
	EndsAt   time.Time `json:"ends_at"`
	// StartsInSeconds is how long until the sale starts (0 once started).
	StartsInSeconds float64 `json:"starts_in_seconds"`
	// ReservationTTLSeconds is the reservation validity; the backlog gate
	// closes this activity's admission at CloseRatio × TTL.
	ReservationTTLSeconds float64 `json:"reservation_ttl_seconds"`
	InitialStock          int64   `json:"initial_stock"`
	RedisAvailable        int64   `json:"redis_available"`
	PendingReservations   int64   `json:"pending_reservations"`
	Orders                int64   `json:"orders"`
	PGFinalStock          int64   `json:"pg_final_stock"`
	ReleasesInFlight      int64   `json:"releases_in_flight"`
	Drift                 int64   `json:"drift"`
	// AdmissionOpen is the backlog gate's answer for this activity at the
	// snapshot's time; AdmissionDetail says why it is closed.
	AdmissionOpen   bool   `json:"admission_open"`
	AdmissionDetail string `json:"admission_detail,omitempty"`
	// PlaceOrderCalls and AcceptedPerSecond are this instance's PlaceOrder
	// calls of the activity SKU over the rate window and the reservations
	// they took per second; PlaceOrderP99Seconds bounds those calls' 99th
	// latency percentile (application.SaleRates; 0 without calls).
	PlaceOrderCalls      int64   `json:"place_order_calls"`
	AcceptedPerSecond    float64 `json:"accepted_per_second"`
	PlaceOrderP99Seconds float64 `json:"place_order_p99_seconds"`
	// OrdersPerSecond is the change of Orders per second between the
	// oldest earlier snapshot within the rate window and this one: orders
	// of every instance, net of cancellations; nil until this process
	// took such an earlier snapshot of the activity SKU.
	OrdersPerSecond *float64 `json:"orders_per_second"`
	Error           string   `json:"error,omitempty"`
}

// StatusBacklog is the backlog gate's last measurement.
type StatusBacklog struct {
	// Unresolved is the reservation_unresolved gauge (nil when absent).
	Unresolved *float64 `json:"unresolved"`
	// OldestAgeSeconds is the age, at the snapshot, of the oldest
	// unresolved reservation the gate last saw; 0 when there was none.
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	// OldestAt is when that reservation was made (absent when none).
	OldestAt time.Time `json:"oldest_at,omitzero"`
	// MeasuredAt is the gate's last successful measurement (absent when
	// never); MeasurementAgeSeconds its age at the snapshot.
	MeasuredAt            time.Time `json:"measured_at,omitzero"`
	MeasurementAgeSeconds float64   `json:"measurement_age_seconds"`
	// CloseRatio is SECKILL_BACKLOG_CLOSE_RATIO: admission to an activity
	// closes once OldestAgeSeconds exceeds CloseRatio × its reservation
	// TTL (see StockRow).
	CloseRatio float64 `json:"close_ratio"`
	// Open and Closed count the shown activity SKUs by admission.
	Open   int    `json:"admission_open"`
	Closed int    `json:"admission_closed"`
	Error  string `json:"error,omitempty"`
}

// StatusConsumers is the consumer lag per group.
type StatusConsumers struct {
	Groups []ConsumerRow `json:"groups"`
	// BrokerMetricsUp is ports.MessagingSnapshot.BrokerFiguresUp (the
	// gauge mq_broker_metrics_up): whether the last read of
	// the broker's exporter succeeded (nil when SECKILL_ROCKETMQ_METRICS_URL
	// is not set and the broker's figures are not read at all).
	BrokerMetricsUp *bool `json:"broker_metrics_up"`
	// LiveInstances and Share are this instance's part of
	// SECKILL_CONSUMER_GLOBAL_BUDGET: the live worker instances at the
	// last heartbeat and the part of its budgets it may use (nil when the
	// budget is not shared).
	LiveInstances *int     `json:"live_instances,omitempty"`
	Share         *float64 `json:"budget_share,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// ConsumerRow is one consumer group's figures; nil when the registry has
// no sample (the broker reports a group once its consumer is online).
type ConsumerRow struct {
	Group       string   `json:"group"`
	LagSeconds  *float64 `json:"lag_seconds"`
	Ready       *float64 `json:"ready"`
	LagMessages *float64 `json:"lag_messages"`
	Inflight    *float64 `json:"inflight"`
	// Limit is the group's adaptive concurrency limit on this instance
	// (consumer_concurrency_limit; nil with the fixed limiter), Ceiling
	// the highest it may reach now (its budget, scaled by the instance's
	// share of a global budget, or raised while the order-create backlog
	// is urgent).
	Limit   *float64 `json:"concurrency_limit,omitempty"`
	Ceiling *float64 `json:"concurrency_ceiling,omitempty"`
	// LastAction and LastReason are the limiter's last decision: the row
	// of the decision table that applied and the signal that chose it;
	// LastAt is the time of that tick.
	LastAction string    `json:"concurrency_action,omitempty"`
	LastReason string    `json:"concurrency_reason,omitempty"`
	LastAt     time.Time `json:"concurrency_decided_at,omitzero"`
}

// StatusDeadLetters are the open dead letters.
type StatusDeadLetters struct {
	Open             int64     `json:"open"`
	OldestAt         time.Time `json:"oldest_at,omitzero"`
	OldestAgeSeconds float64   `json:"oldest_age_seconds"`
	Error            string    `json:"error,omitempty"`
}

// StatusPublisher is the publisher's circuit breaker and send timeout.
type StatusPublisher struct {
	Breakers []BreakerRow `json:"breakers"`
	// SendTimeoutSeconds is the adaptive send timeout (the gauge
	// mq_send_timeout_seconds; nil when the broker adapter does not adapt
	// it).
	SendTimeoutSeconds *float64 `json:"send_timeout_seconds"`
	Error              string   `json:"error,omitempty"`
}

// BreakerRow is the breaker of one endpoint: State is a
// ports.BreakerState (0 closed, 1 half-open, 2 open), Name its name.
type BreakerRow struct {
	Endpoint string `json:"endpoint"`
	State    int    `json:"state"`
	Name     string `json:"name"`
}

// Handler returns the handler of GET /status (HTML).
func (p *StatusPage) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := p.Snapshot(r.Context())
		var buf bytes.Buffer
		if err := p.tmpl.Execute(&buf, st); err != nil {
			p.log.ErrorContext(r.Context(), "render the status page", "error", err)
			http.Error(w, "render the status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
}

// JSONHandler returns the handler of GET /status.json.
func (p *StatusPage) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := json.MarshalIndent(p.Snapshot(r.Context()), "", "  ")
		if err != nil {
			http.Error(w, "encode the status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(b, '\n'))
	})
}

// Snapshot returns a snapshot taken now, or the one being taken for a
// concurrent caller. The snapshot does not depend on ctx's cancellation
// (another caller may be waiting for it) and is bounded by statusTimeout;
// a caller whose ctx ends first gets a snapshot saying so.
func (p *StatusPage) Snapshot(ctx context.Context) Status {
	p.mu.Lock()
	c := p.pending
	if c == nil {
		c = &statusCall{done: make(chan struct{})}
		p.pending = c
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.pending = nil
			p.mu.Unlock()
			close(c.done)
		}()
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
		defer cancel()
		c.st = p.build(bctx)
		return c.st
	}
	p.mu.Unlock()
	select {
	case <-c.done:
		return c.st
	case <-ctx.Done():
		msg := fmt.Sprintf("waiting for the snapshot: %v", ctx.Err())
		return Status{Instance: p.instance, At: p.clock.Now(), Build: StatusBuild{Error: msg},
			Activities: StatusActivities{Error: msg}, Backlog: StatusBacklog{Error: msg},
			Consumers: StatusConsumers{Error: msg}, DeadLetters: StatusDeadLetters{Error: msg},
			Publisher: StatusPublisher{Error: msg}}
	}
}

// build takes one snapshot: the messaging figures, the dead letters and
// the activity SKUs' stock reports concurrently, then the sections derived
// from them.
func (p *StatusPage) build(ctx context.Context) Status {
	now := p.clock.Now()
	st := Status{Instance: p.instance, At: now, Build: p.buildInfo}
	var (
		wg      sync.WaitGroup
		snap    ports.MessagingSnapshot
		snapErr error
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		snap, snapErr = p.messagingSnapshot(ctx, now)
	}()
	go func() {
		defer wg.Done()
		st.DeadLetters = p.deadLetterSection(ctx, now)
	}()
	go func() {
		defer wg.Done()
		st.Activities = p.activitySection(ctx, now)
	}()
	wg.Wait()
	st.Backlog = p.backlogSection(now, st.Activities.Rows)
	st.Consumers = consumerSection(snap, snapErr)
	p.addLimits(&st.Consumers)
	st.Publisher = publisherSection(snap, snapErr)
	return st
}

// messagingSnapshot reads the broker's state. A read that succeeds is
// kept; one that fails with nothing read (the gathering did not finish in
// time on a starved process, say) is answered with the last one kept,
// its error saying how old those figures are, so that the page shows the
// groups it showed a moment ago rather than none.
func (p *StatusPage) messagingSnapshot(ctx context.Context, now time.Time) (ports.MessagingSnapshot, error) {
	snap, err := p.messaging.MessagingSnapshot(ctx)
	p.messagingMu.Lock()
	defer p.messagingMu.Unlock()
	switch {
	case err == nil:
		p.lastMessaging, p.lastMessagingAt = snap, now
	case len(snap.Groups) == 0 && !p.lastMessagingAt.IsZero():
		err = fmt.Errorf("%w; the figures shown were read %s ago", err, now.Sub(p.lastMessagingAt).Round(time.Millisecond))
		snap = p.lastMessaging
	}
	return snap, err
}

// activitySection lists the activity SKUs scheduled or on sale at now
// (or ended less than statusRecentlyEnded ago) and takes one stock report
// of each, at most statusMaxActivities of them: the started ones first,
// then the scheduled ones by their start.
func (p *StatusPage) activitySection(ctx context.Context, now time.Time) StatusActivities {
	var all []ports.Activity
	if err := p.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		all, err = tx.ListActivities(ctx)
		return err
	}); err != nil {
		return StatusActivities{Error: fmt.Sprintf("list activities: %v", err)}
	}
	var shown []ports.Activity
	sec := StatusActivities{RateWindowSeconds: application.SaleRateWindow.Seconds()}
	for _, a := range all {
		if !now.Before(endOf(a).Add(statusRecentlyEnded)) {
			continue
		}
		shown = append(shown, a)
	}
	slices.SortStableFunc(shown, func(a, b ports.Activity) int {
		as, bs := now.Before(a.StartsAt), now.Before(b.StartsAt)
		switch {
		case as && bs:
			return a.StartsAt.Compare(b.StartsAt)
		case as:
			return 1
		case bs:
			return -1
		}
		return 0
	})
	if len(shown) > statusMaxActivities {
		sec.Omitted = len(shown) - statusMaxActivities
		shown = shown[:statusMaxActivities]
	}
	sec.Rows = make([]StockRow, len(shown))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(statusReportWorkers, len(shown)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sec.Rows[i] = p.stockRow(ctx, now, shown[i])
			}
		}()
	}
	for i := range shown {
		next <- i
	}
	close(next)
	wg.Wait()
	p.addOrderRates(now, sec.Rows)
	return sec
}

// endOf returns when a's sale ends: when an operator closed it, else its
// ends_at.
func endOf(a ports.Activity) time.Time {
	if !a.ClosedAt.IsZero() && a.ClosedAt.Before(a.EndsAt) {
		return a.ClosedAt
	}
	return a.EndsAt
}

// addOrderRates sets the rows' OrdersPerSecond from the orders samples of
// the earlier snapshots and keeps this snapshot's: at most
// statusOrderSamples per activity SKU, none older than the rate window,
// and only of the activity SKUs shown now.
func (p *StatusPage) addOrderRates(now time.Time, rows []StockRow) {
	p.samplesMu.Lock()
	defer p.samplesMu.Unlock()
	kept := make(map[activitySKU][]orderSample, len(rows))
	for i := range rows {
		r := &rows[i]
		k := activitySKU{r.ActivityID, r.SKUID}
		old := p.samples[k]
		var recent []orderSample
		for _, s := range old {
			if age := now.Sub(s.at); age > 0 && age <= application.SaleRateWindow {
				recent = append(recent, s)
			}
		}
		if r.Error != "" {
			kept[k] = recent
			continue
		}
		if len(recent) > 0 {
			first := recent[0]
			v := float64(r.Orders-first.orders) / now.Sub(first.at).Seconds()
			r.OrdersPerSecond = &v
		}
		recent = append(recent, orderSample{at: now, orders: r.Orders})
		if len(recent) > statusOrderSamples {
			recent = recent[len(recent)-statusOrderSamples:]
		}
		kept[k] = recent
	}
	p.samples = kept
}

// stockRow takes the stock report of a and asks the gate whether a
// admits new reservations at now.
func (p *StatusPage) stockRow(ctx context.Context, now time.Time, a ports.Activity) StockRow {
	row := StockRow{ActivityID: a.ActivityID, SKUID: a.SKUID, StartsAt: a.StartsAt, EndsAt: a.EndsAt,
		Paused: a.Paused, ClosedAt: a.ClosedAt, StartsInSeconds: max(a.StartsAt.Sub(now), 0).Seconds(),
		ReservationTTLSeconds: a.ReservationTTL.Seconds(), State: a.StateAt(now, false)}
	row.OnSale = row.State != ports.ActivityEnded && row.State != ports.ActivityScheduled
	rate := p.rates.Rate(a.ActivityID, a.SKUID, now)
	row.PlaceOrderCalls, row.AcceptedPerSecond, row.PlaceOrderP99Seconds = rate.Calls, rate.AcceptedPerSecond, rate.P99.Seconds()
	if err := p.gate.Admit(now, a.ReservationTTL); err != nil {
		row.AdmissionDetail = err.Error()
	} else {
		row.AdmissionOpen = true
	}
	rep, err := p.admin.GetStockReport(ctx, a.ActivityID, a.SKUID)
	if err != nil {
		row.Error = fmt.Sprintf("stock report: %v", err)
		return row
	}
	row.InitialStock, row.RedisAvailable, row.PendingReservations = rep.InitialStock, rep.RedisAvailable, rep.PendingReservations
	row.Orders, row.PGFinalStock, row.ReleasesInFlight = rep.NonCanceledOrders, rep.PGFinalStock, rep.ReleasesInFlight
	row.Drift = rep.Drift()
	row.State = a.StateAt(now, rep.RedisAvailable <= 0)
	return row
}

// deadLetterSection counts the open dead letters.
func (p *StatusPage) deadLetterSection(ctx context.Context, now time.Time) StatusDeadLetters {
	st, err := p.deadLetters.Stats(ctx)
	if err != nil {
		return StatusDeadLetters{Error: err.Error()}
	}
	sec := StatusDeadLetters{Open: st.Open, OldestAt: st.OldestOpenAt}
	if !st.OldestOpenAt.IsZero() {
		sec.OldestAgeSeconds = max(now.Sub(st.OldestOpenAt), 0).Seconds()
	}
	return sec
}

// backlogSection reads the gate's last measurement and counts the
// admission of the shown activity SKUs (rows).
func (p *StatusPage) backlogSection(now time.Time, rows []StockRow) StatusBacklog {
	gs := p.gate.State()
	sec := StatusBacklog{CloseRatio: gs.Ratio, OldestAt: gs.OldestUnresolvedAt, MeasuredAt: gs.MeasuredAt}
	if !gs.OldestUnresolvedAt.IsZero() {
		sec.OldestAgeSeconds = max(now.Sub(gs.OldestUnresolvedAt), 0).Seconds()
	}
	var errs []string
	if gs.MeasuredAt.IsZero() {
		errs = append(errs, "the gate has not measured the backlog yet: admission is closed")
	} else {
		unresolved := float64(gs.Unresolved)
		sec.Unresolved = &unresolved
		sec.MeasurementAgeSeconds = max(now.Sub(gs.MeasuredAt), 0).Seconds()
		if now.Sub(gs.MeasuredAt) > 5*gs.Interval+time.Second {
			errs = append(errs, fmt.Sprintf("the last measurement is %s old: admission is closed until the gate measures again",
				now.Sub(gs.MeasuredAt).Round(time.Millisecond)))
		}
	}
	for _, r := range rows {
		if r.AdmissionOpen {
			sec.Open++
		} else {
			sec.Closed++
		}
	}
	if len(errs) > 0 {
		sec.Error = strings.Join(errs, "\n")
	}
	return sec
}

// addLimits adds the adaptive limiters' state to the consumer rows (a
// group the registry shows no figure for gets a row of its own).
func (p *StatusPage) addLimits(sec *StatusConsumers) {
	if p.limits == nil {
		return
	}
	for _, st := range p.limits.States() {
		i := slices.IndexFunc(sec.Groups, func(r ConsumerRow) bool { return r.Group == st.Group })
		if i < 0 {
			sec.Groups = append(sec.Groups, ConsumerRow{Group: st.Group})
			i = len(sec.Groups) - 1
		}
		row := &sec.Groups[i]
		limit, ceiling := float64(st.Limit), float64(st.Ceiling)
		row.Limit, row.Ceiling = &limit, &ceiling
		row.LastAction, row.LastReason, row.LastAt = string(st.Last.Action), string(st.Last.Reason), st.LastAt
	}
	slices.SortFunc(sec.Groups, func(a, b ConsumerRow) int { return cmp.Compare(a.Group, b.Group) })
	if live, share := p.limits.Share(); live > 0 {
		sec.LiveInstances, sec.Share = &live, &share
	}
	if len(sec.Groups) > 0 && sec.Error == noGroupFigures {
		sec.Error = ""
	}
}

// noGroupFigures is the consumer section's note while no group has a
// figure.
const noGroupFigures = "no consumer group reports a figure yet"

// consumerSection lists the groups' figures of snap.
func consumerSection(snap ports.MessagingSnapshot, snapErr error) StatusConsumers {
	var sec StatusConsumers
	if snapErr != nil {
		sec.Error = snapErr.Error()
	}
	for _, g := range snap.Groups {
		sec.Groups = append(sec.Groups, ConsumerRow{Group: g.Group, LagSeconds: g.LagSeconds, Ready: g.Ready,
			LagMessages: g.LagMessages, Inflight: g.Inflight})
	}
	sec.BrokerMetricsUp = snap.BrokerFiguresUp
	if len(sec.Groups) == 0 && sec.Error == "" {
		sec.Error = noGroupFigures
	}
	return sec
}

// publisherSection lists the breakers and the send timeout of snap.
func publisherSection(snap ports.MessagingSnapshot, snapErr error) StatusPublisher {
	var sec StatusPublisher
	for _, b := range snap.Breakers {
		sec.Breakers = append(sec.Breakers, BreakerRow{Endpoint: b.Endpoint, State: int(b.State), Name: b.State.String()})
	}
	if snap.SendTimeout != nil {
		secs := snap.SendTimeout.Seconds()
		sec.SendTimeoutSeconds = &secs
	}
	if snapErr != nil {
		sec.Error = snapErr.Error()
	}
	return sec
}

// statusTemplate parses the page that renders a Status.
func statusTemplate() (*template.Template, error) {
	t, err := template.New("status").Funcs(template.FuncMap{
		"secs":     fmtSeconds,
		"optSecs":  func(v *float64) string { return optional(v, fmtSeconds) },
		"optNum":   func(v *float64) string { return optional(v, fmtNumber) },
		"stamp":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") },
		"pct":      func(v float64) string { return strconv.FormatFloat(v*100, 'f', -1, 64) + "%" },
		"limit":    func(ratio, ttl float64) string { return fmtSeconds(ratio * ttl) },
		"share":    share,
		"lagClass": lagClass,
		"isFalse":  func(v *bool) bool { return v != nil && !*v },
		"isNil":    func(v *bool) bool { return v == nil },
		"rate":     func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		"optRate": func(v *float64) string {
			return optional(v, func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) })
		},
		"stateName": stateName,
		"stateClass": func(s ports.ActivityState) string {
			return "st-" + strings.ToLower(strings.ReplaceAll(string(s), "_", ""))
		},
		"startsIn": startsIn,
	}).Parse(statusHTML)
	if err != nil {
		return nil, fmt.Errorf("parse the status page: %w", err)
	}
	return t, nil
}

// fmtSeconds formats seconds as a duration rounded to the millisecond.
func fmtSeconds(s float64) string {
	if math.IsNaN(s) {
		return "?"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

// fmtNumber formats a count (integral values without a fraction).
func fmtNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// optional formats v, or a dash when there is no sample.
func optional(v *float64, f func(float64) string) string {
	if v == nil {
		return "–"
	}
	return f(*v)
}

// share is age as a percentage of ratio × ttl, capped at 999%.
func share(age, ratio, ttl float64) string {
	limit := ratio * ttl
	if limit <= 0 {
		return "–"
	}
	return strconv.Itoa(int(math.Min(age/limit*100, 999))) + "%"
}

// stateName is how the page names an activity state: SOLD OUT, ON SALE.
func stateName(s ports.ActivityState) string {
	return strings.ReplaceAll(string(s), "_", " ")
}

// startsIn says when a scheduled sale starts: "starts in 4m" (rounded
// up to the second below a minute, to the minute below a day), else its
// time.
func startsIn(secs float64, at time.Time) string {
	d := time.Duration(secs * float64(time.Second))
	switch {
	case d <= 0:
		return ""
	case d < time.Minute:
		return "starts in " + d.Round(time.Second).String()
	case d < 24*time.Hour:
		m := int(math.Ceil(d.Minutes()))
		if m < 60 {
			return "starts in " + strconv.Itoa(m) + "m"
		}
		return "starts in " + strconv.Itoa(m/60) + "h" + strconv.Itoa(m%60) + "m"
	}
	return "starts " + at.UTC().Format("2006-01-02 15:04 UTC")
}

// lagClass marks a group whose oldest unacknowledged message is older
// than 5 s (warn) or 30 s (bad).
func lagClass(v *float64) string {
	switch {
	case v == nil:
		return ""
	case *v > 30:
		return "bad"
	case *v > 5:
		return "warn"
	}
	return ""
}

const statusHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="2">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>seckill status · {{.Instance}}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:24px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:18px;margin:0}
header span{color:#c4c9d4}
main{padding:12px 20px;display:grid;grid-template-columns:6fr 3fr 3fr;gap:12px;align-items:start}
@media (max-width:900px){main{grid-template-columns:1fr}main>section{grid-column:1/-1!important;grid-row:auto!important}}
section{background:#fff;border:1px solid #dde0e6;border-radius:6px;padding:10px 14px;overflow-x:auto}
section.wide{grid-column:1/-1}
section.tall{grid-row:span 2}
section.pair{grid-column:span 2}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:100%}
th,td{padding:4px 7px;border-bottom:1px solid #eceef2;text-align:right;white-space:nowrap}
th{font-weight:600;color:#4a5163;background:#f8f9fb}
th:first-child,td:first-child{text-align:left}
td.text{text-align:left}
.ok{color:#137333;font-weight:600}
.warn{color:#a05a00;font-weight:600}
.bad{color:#b3261e;font-weight:700}
.err{color:#b3261e;background:#fdecea;border-radius:4px;padding:4px 8px;margin:6px 0;white-space:pre-wrap}
.muted{color:#6b7280}
.state{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;font-weight:700;letter-spacing:.02em}
.st-onsale{background:#e6f4ea;color:#137333}
.st-paused,.st-soldout{background:#fef3e0;color:#a05a00}
.st-ended{background:#eceef2;color:#6b7280}
.st-scheduled{background:#e8f0fe;color:#1a56b8}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}
dt{color:#4a5163}
dd{margin:0;font-variant-numeric:tabular-nums}
td{font-variant-numeric:tabular-nums}
</style>
</head>
<body>
<header><h1>seckill status</h1><span>instance <b>{{.Instance}}</b></span><span>snapshot <b id="snapshot-at">{{stamp .At}}</b></span><span>refreshes every 2 s</span></header>
<main>
<section class="wide" id="activities">
<h2>Activity SKUs: state, stock books (I6) and rates</h2>
{{with .Activities.Error}}<div class="err">{{.}}</div>{{end}}
<table>
<tr><th>activity / SKU</th><th>state</th><th>accepted/s here</th><th>PlaceOrder p99 here</th><th>orders/s</th><th>initial stock</th><th>Redis available</th><th>pending reservations</th><th>orders (live)</th><th>final stock (PostgreSQL)</th><th>releases in flight</th><th>drift</th></tr>
{{range .Activities.Rows}}<tr data-activity="{{.ActivityID}}/{{.SKUID}}">
<td>{{.ActivityID}} / {{.SKUID}}</td>
<td class="text"><span class="state {{stateClass .State}}" data-state="{{.State}}">{{stateName .State}}</span>{{with startsIn .StartsInSeconds .StartsAt}} <span class="muted">{{.}}</span>{{end}}</td>
<td data-rate="accepted_per_second">{{rate .AcceptedPerSecond}}</td>
<td data-rate="place_order_p99" title="{{.PlaceOrderCalls}} calls">{{if .PlaceOrderCalls}}≤ {{secs .PlaceOrderP99Seconds}}{{else}}–{{end}}</td>
<td data-rate="orders_per_second">{{optRate .OrdersPerSecond}}</td>
{{if .Error}}<td colspan="7" class="text"><div class="err">{{.Error}}</div></td>{{else}}<td data-field="initial_stock">{{.InitialStock}}</td>
<td data-field="redis_available">{{.RedisAvailable}}</td>
<td data-field="pending_reservations">{{.PendingReservations}}</td>
<td data-field="orders">{{.Orders}}</td>
<td data-field="pg_final_stock">{{.PGFinalStock}}</td>
<td data-field="releases_in_flight">{{.ReleasesInFlight}}</td>
<td data-field="drift" class="{{if .Drift}}bad{{else}}ok{{end}}">{{.Drift}}</td>{{end}}
</tr>
{{else}}<tr><td colspan="12" class="text muted">no activity SKU scheduled or on sale</td></tr>
{{end}}</table>
{{with .Activities.Omitted}}<p class="muted">{{.}} more activity SKUs are not shown.</p>{{end}}
<p class="muted">drift = initial stock − Redis available − pending reservations − orders − releases in flight (0 when the books balance).
Rates over the last {{secs .Activities.RateWindowSeconds}}: accepted/s and the PlaceOrder p99 (the bound of its latency bucket) are this instance's calls;
orders/s is the change of the orders (every instance, net of cancellations) since this instance's oldest snapshot within that window, – until there is one.</p>
</section>

<section class="wide" id="consumers">
<h2>Consumer lag per group</h2>
{{with .Consumers.Error}}<div class="err">{{.}}</div>{{end}}
{{if isFalse .Consumers.BrokerMetricsUp}}<div class="err">the last read of the broker's exporter failed (mq_broker_metrics_up 0)</div>{{end}}
<table>
<tr><th>group</th><th>oldest unacked</th><th>ready</th><th>unacked</th><th>in flight here</th><th>limit here</th><th>ceiling</th><th>last decision</th></tr>
{{range .Consumers.Groups}}<tr data-group="{{.Group}}">
<td>{{.Group}}</td><td class="{{lagClass .LagSeconds}}">{{optSecs .LagSeconds}}</td><td>{{optNum .Ready}}</td><td>{{optNum .LagMessages}}</td><td>{{optNum .Inflight}}</td><td>{{optNum .Limit}}</td><td>{{optNum .Ceiling}}</td><td>{{with .LastAction}}{{.}}{{end}}{{with .LastReason}} on {{.}}{{end}}</td></tr>
{{end}}</table>
{{with .Consumers.LiveInstances}}<p>SECKILL_CONSUMER_GLOBAL_BUDGET is shared by {{.}} live worker instances: this one uses {{optNum $.Consumers.Share}} of its budgets.</p>{{end}}
{{if isNil .Consumers.BrokerMetricsUp}}<p class="muted">The broker's figures (oldest unacked, ready, unacked) are not read (RocketMQ reads them when SECKILL_ROCKETMQ_METRICS_URL is set; RabbitMQ and Kafka do not report them).</p>{{end}}
</section>

<section class="tall" id="backlog">
<h2>Backlog and admission</h2>
{{with .Backlog.Error}}<div class="err">{{.}}</div>{{end}}
<dl>
<dt>oldest unresolved reservation</dt><dd data-field="oldest_age">{{if .Backlog.OldestAt.IsZero}}none{{else}}{{secs .Backlog.OldestAgeSeconds}} old{{end}}</dd>
<dt>unresolved reservations</dt><dd>{{optNum .Backlog.Unresolved}}</dd>
<dt>close ratio</dt><dd>{{pct .Backlog.CloseRatio}} of the reservation TTL</dd>
<dt>last measured</dt><dd>{{if .Backlog.MeasuredAt.IsZero}}never{{else}}{{secs .Backlog.MeasurementAgeSeconds}} ago{{end}}</dd>
<dt>admission</dt><dd data-field="admission">{{if .Backlog.Closed}}<span class="bad">closed for {{.Backlog.Closed}}</span>, {{end}}<span class="ok">open for {{.Backlog.Open}}</span> activity SKU(s)</dd>
</dl>
{{if .Activities.Rows}}<table style="margin-top:8px">
<tr><th>activity / SKU</th><th>TTL</th><th>closes at</th><th>oldest / limit</th><th>admission</th></tr>
{{$b := .Backlog}}{{range .Activities.Rows}}<tr data-admission="{{.ActivityID}}/{{.SKUID}}">
<td>{{.ActivityID}} / {{.SKUID}}</td><td>{{secs .ReservationTTLSeconds}}</td><td>{{limit $b.CloseRatio .ReservationTTLSeconds}}</td>
<td>{{share $b.OldestAgeSeconds $b.CloseRatio .ReservationTTLSeconds}}</td>
<td class="text">{{if .AdmissionOpen}}<span class="ok">open</span>{{else}}<span class="bad" title="{{.AdmissionDetail}}">closed</span>{{end}}</td></tr>
{{end}}</table>{{end}}
</section>

<section id="dead-letters">
<h2>Dead letters</h2>
{{with .DeadLetters.Error}}<div class="err">{{.}}</div>{{else}}
<dl>
<dt>open</dt><dd data-field="dlq_open" class="{{if .DeadLetters.Open}}bad{{else}}ok{{end}}">{{.DeadLetters.Open}}</dd>
<dt>oldest</dt><dd>{{if .DeadLetters.OldestAt.IsZero}}none{{else}}{{secs .DeadLetters.OldestAgeSeconds}} old ({{stamp .DeadLetters.OldestAt}}){{end}}</dd>
</dl>{{end}}
</section>

<section id="publisher">
<h2>Publisher</h2>
{{with .Publisher.Error}}<div class="err">{{.}}</div>{{end}}
<dl>
{{if not .Publisher.Breakers}}<dt>breakers</dt><dd class="muted">none (this broker adapter has no per-endpoint breaker)</dd>
{{end}}{{range .Publisher.Breakers}}<dt>breaker {{.Endpoint}}</dt><dd data-breaker="{{.Endpoint}}" class="{{if eq .State 0}}ok{{else if eq .State 1}}warn{{else}}bad{{end}}">{{.Name}}</dd>
{{end}}<dt>adaptive send timeout</dt><dd>{{optSecs .Publisher.SendTimeoutSeconds}}</dd>
</dl>
</section>

<section class="pair" id="build">
<h2>Build</h2>
{{with .Build.Error}}<div class="err">{{.}}</div>{{else}}
<dl>
<dt>version</dt><dd>{{.Build.Version}}</dd>
<dt>revision</dt><dd>{{.Build.Revision}}{{if eq .Build.Modified "true"}} (modified){{end}}</dd>
<dt>Go</dt><dd>{{.Build.GoVersion}}</dd>
<dt>snapshot</dt><dd>{{stamp .At}}</dd>
</dl>{{end}}
</section>
</main>
</body>
</html>
`
