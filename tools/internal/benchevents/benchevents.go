package benchevents

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/benchplace"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// eventsOptions are the flags of `seckill-bench events`.
type eventsOptions struct {
	events       int
	rounds       int
	writeBatch   int
	liveRate     int
	liveDuration time.Duration
	subscribers  int
	saleClients  int
	saleDuration time.Duration
	cpuProfile   string
}

// eventsResult is the JSON line `seckill-bench events` ends with.
type eventsResult struct {
	Bench             string    `json:"bench"`
	Broker            string    `json:"broker"`
	CPUs              int       `json:"cpus"`
	Events            int       `json:"events"`
	Rounds            int       `json:"rounds"`
	WritePerSec       float64   `json:"write_events_per_sec"`
	SequencePerSec    float64   `json:"sequence_events_per_sec"`
	CatchUpDirect     []float64 `json:"catch_up_direct_events_per_sec"`
	CatchUpAPI        []float64 `json:"catch_up_api_events_per_sec"`
	CatchUpDirectMed  float64   `json:"catch_up_direct_median"`
	CatchUpAPIMed     float64   `json:"catch_up_api_median"`
	LiveTargetRate    int       `json:"live_target_events_per_sec"`
	LiveWrittenRate   float64   `json:"live_written_events_per_sec"`
	LiveEvents        int       `json:"live_events"`
	LiveP50Ms         float64   `json:"live_p50_ms"`
	LiveP99Ms         float64   `json:"live_p99_ms"`
	LiveMaxMs         float64   `json:"live_max_ms"`
	SaleSubscribers   int       `json:"sale_subscribers"`
	SaleRateNone      []float64 `json:"sale_place_per_sec_no_subscribers,omitempty"`
	SaleRateWith      []float64 `json:"sale_place_per_sec_with_subscribers,omitempty"`
	SaleRateNoneMed   float64   `json:"sale_no_subscribers_median,omitempty"`
	SaleRateWithMed   float64   `json:"sale_with_subscribers_median,omitempty"`
	SaleSubscriberEvs int64     `json:"sale_events_delivered_to_subscribers,omitempty"`
	// LoadBefore and LoadAfter are the machine's 1-minute load average at
	// the start and at the end (from /proc/loadavg; empty elsewhere): the
	// figures are comparable only on an otherwise idle machine.
	LoadBefore string `json:"load_before,omitempty"`
	LoadAfter  string `json:"load_after,omitempty"`
}

// loadAverage returns the 1-minute load average of /proc/loadavg, or ""
// where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// eventsRun is what the phases of one `seckill-bench events` run share:
// the options, the scratch stack's configuration, the store the events are
// written to, the activity of the written orders, the head position after
// the fill, and the result being filled in.
type eventsRun struct {
	opts  eventsOptions
	cfg   config.Config
	log   *slog.Logger
	store *postgres.Store
	actID int64
	head  int64
	res   eventsResult
}

// Run is `seckill-bench events` with the command-line flags args, its
// table and JSON line going to stdout. It measures the event
// subscription (EventService.Subscribe): catch-up from position 0 over a
// store of --events events, directly on application.EventSubscriptions
// and through the API; live delivery from commit to subscriber while
// orders are written at a steady rate; and, with --subscribers > 0,
// PlaceOrder's rate with that many live subscribers beside none. Every
// subscriber's stream is checked (positions strictly increasing, nothing
// missing): a violation fails the command.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseEventsFlags(args)
	if err != nil {
		return err
	}
	cfg, log, err := benchenv.LoadConfig()
	if err != nil {
		return err
	}
	cfg.Events.MaxStreams = max(cfg.Events.MaxStreams, o.subscribers+8)
	sc, err := benchenv.NewScratch(ctx, cfg, log, 300)
	if err != nil {
		return err
	}
	defer sc.Close()
	cfg = sc.Config
	// The reconciler would find the bench's orders without Redis
	// reservations; it is not part of what is measured.
	cfg.Workers.ReconcileInterval = 0
	store, err := postgres.Open(ctx, postgres.Config{DSN: sc.DSN, MaxConns: 8}, prometheus.NewRegistry(), log)
	if err != nil {
		return err
	}
	defer store.Close()

	r := &eventsRun{opts: o, cfg: cfg, log: log, store: store}
	r.res = eventsResult{Bench: "events", Broker: cfg.Broker.Name, CPUs: runtime.NumCPU(), Rounds: o.rounds,
		LiveTargetRate: o.liveRate, SaleSubscribers: o.subscribers, LoadBefore: loadAverage()}
	r.actID = salekit.BenchActivityID()
	nOrders := (o.events + 2) / 3
	r.res.Events = 3 * nOrders
	fmt.Fprintf(stdout, "seckill-bench events: %s, %d cores (GOMAXPROCS %d), %d events in the store (%d paid orders), %d rounds, fresh database\n\n",
		benchenv.BrokerText(cfg), runtime.NumCPU(), runtime.GOMAXPROCS(0), r.res.Events, nOrders, o.rounds)
	if err := r.fillStore(ctx, nOrders); err != nil {
		return err
	}
	return r.measureOnService(ctx, stdout)
}

// parseEventsFlags parses the flags of `seckill-bench events` into
// eventsOptions and checks their ranges; an out-of-range value is an
// error wrapping flag.ErrHelp.
func parseEventsFlags(args []string) (eventsOptions, error) {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	var o eventsOptions
	fs.IntVar(&o.events, "events", 100_000, "events written into the store before the catch-up (paid orders of 3 events each, rounded up)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of each measurement (figures are medians)")
	fs.IntVar(&o.writeBatch, "write-batch", 1000, "orders per write transaction while filling the store")
	fs.IntVar(&o.liveRate, "live-rate", 500, "events per second written during the live measurement")
	fs.DurationVar(&o.liveDuration, "live-duration", 10*time.Second, "length of the live measurement")
	fs.IntVar(&o.subscribers, "subscribers", 20, "live subscribers attached during the sale comparison (0: no sale comparison)")
	fs.IntVar(&o.saleClients, "sale-clients", 64, "PlaceOrder clients of the sale comparison")
	fs.DurationVar(&o.saleDuration, "sale-duration", 5*time.Second, "measuring time of each sale level")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the catch-up rounds (this process: service and client) to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.events < 3:
		return o, fmt.Errorf("%w: --events must be >= 3", flag.ErrHelp)
	case o.rounds < 1:
		return o, fmt.Errorf("%w: --rounds must be >= 1", flag.ErrHelp)
	case o.writeBatch < 1:
		return o, fmt.Errorf("%w: --write-batch must be >= 1", flag.ErrHelp)
	case o.liveRate < 1 || o.liveDuration <= 0:
		return o, fmt.Errorf("%w: --live-rate and --live-duration must be > 0", flag.ErrHelp)
	case o.subscribers < 0 || o.saleClients < 1 || o.saleDuration <= 0:
		return o, fmt.Errorf("%w: --subscribers must be >= 0, --sale-clients and --sale-duration > 0", flag.ErrHelp)
	}
	return o, nil
}

// fillStore writes nOrders paid orders' events into the store through the
// write path, --write-batch orders per transaction, then sequences them
// all; it records both rates and the head position.
func (r *eventsRun) fillStore(ctx context.Context, nOrders int) error {
	fill, err := benchOrders(r.actID, 0, nOrders, time.Now())
	if err != nil {
		return err
	}
	start := time.Now()
	refs := make([]eventRef, 0, r.res.Events)
	for i := range fill {
		refs = append(refs, eventRef{i, 1}, eventRef{i, 2}, eventRef{i, 3})
	}
	for i := 0; i < len(refs); i += 3 * r.opts.writeBatch {
		if err := writeEventTx(ctx, r.store, fill, refs[i:min(i+3*r.opts.writeBatch, len(refs))]); err != nil {
			return err
		}
	}
	r.res.WritePerSec = float64(r.res.Events) / time.Since(start).Seconds()
	start = time.Now()
	head, err := sequenceAll(ctx, r.store, int64(r.res.Events), 5*time.Minute)
	if err != nil {
		return err
	}
	r.res.SequencePerSec = float64(r.res.Events) / time.Since(start).Seconds()
	r.head = head
	r.log.Info("events bench: store filled and sequenced", "events", r.res.Events, "head", head)
	return nil
}

// measureOnService starts the service (the API with EventService and the
// workers, sequencer included, of role all) on the filled store, runs the
// catch-up, live and sale measurements through it, and prints the result.
func (r *eventsRun) measureOnService(ctx context.Context, stdout io.Writer) error {
	app, cleanup, err := bootstrap.NewApp(ctx, r.cfg, r.log)
	if err != nil {
		return err
	}
	defer cleanup()
	if r.opts.subscribers == 0 {
		benchenv.KeepWorkers(app, "backlog-gate", "sent-marker", "event-tail", "event-sequencer")
	}
	base, stop, err := benchenv.StartInProcess(ctx, app, "events")
	if err != nil {
		return err
	}
	defer stop()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	defer tr.CloseIdleConnections()
	client := seckillv1connect.NewEventServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
	tok, err := api.MintScopedToken([]byte(r.cfg.AuthSecret), 900_000_001, []string{api.ScopeEvents}, 2*time.Hour, time.Now())
	if err != nil {
		return err
	}
	if err := r.measureCatchUp(ctx, client, tok); err != nil {
		return err
	}
	if err := r.measureLive(ctx, client, tok); err != nil {
		return err
	}
	if r.opts.subscribers > 0 {
		if err := saleWithSubscribers(ctx, app, r.store, client, tok, base, []byte(r.cfg.AuthSecret), r.opts, &r.res); err != nil {
			return fmt.Errorf("sale with subscribers: %w", err)
		}
	}
	r.res.LoadAfter = loadAverage()
	printEvents(stdout, r.res)
	return nil
}

// measureCatchUp reads from position 0 to the head, directly on
// application.EventSubscriptions (no window: every read is the store's)
// and through the API, interleaved over --rounds rounds under the CPU
// profile of --cpuprofile, and records the rates and their medians.
func (r *eventsRun) measureCatchUp(ctx context.Context, client seckillv1connect.EventServiceClient, tok string) error {
	direct := application.NewEventSubscriptions(r.store, nil, nil, r.log, application.SubscriptionConfig{Window: -1})
	if r.opts.cpuProfile != "" {
		f, err := os.Create(r.opts.cpuProfile)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	for round := range r.opts.rounds {
		d, err := catchUpDirect(ctx, direct, r.head)
		if err != nil {
			return fmt.Errorf("catch-up (application) round %d: %w", round+1, err)
		}
		r.res.CatchUpDirect = append(r.res.CatchUpDirect, float64(r.head)/d.Seconds())
		a, err := catchUpAPI(ctx, client, tok, r.head)
		if err != nil {
			return fmt.Errorf("catch-up (API) round %d: %w", round+1, err)
		}
		r.res.CatchUpAPI = append(r.res.CatchUpAPI, float64(r.head)/a.Seconds())
		r.log.Info("events bench: catch-up round", "round", round+1, "direct", d, "api", a)
	}
	if r.opts.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	r.res.CatchUpDirectMed, r.res.CatchUpAPIMed = salekit.Median(r.res.CatchUpDirect), salekit.Median(r.res.CatchUpAPI)
	return nil
}

// measureLive attaches one API subscriber at the head while orders are
// written at --live-rate, and records the commit-to-receipt latencies and
// the rate actually written.
func (r *eventsRun) measureLive(ctx context.Context, client seckillv1connect.EventServiceClient, tok string) error {
	lat, written, err := liveDelivery(ctx, r.store, client, tok, r.actID+1, r.opts.liveRate, r.opts.liveDuration, r.head)
	if err != nil {
		return fmt.Errorf("live delivery: %w", err)
	}
	r.res.LiveEvents = len(lat)
	r.res.LiveWrittenRate = written
	r.res.LiveP50Ms = float64(lat.Percentile(0.50)) / 1e6
	r.res.LiveP99Ms = float64(lat.Percentile(0.99)) / 1e6
	r.res.LiveMaxMs = float64(lat.Percentile(1)) / 1e6
	return nil
}

// printEvents writes the table and the JSON line.
func printEvents(w io.Writer, r eventsResult) {
	rates := func(xs []float64) string {
		s := ""
		for i, x := range xs {
			if i > 0 {
				s += " / "
			}
			s += fmt.Sprintf("%.0f", x)
		}
		return s
	}
	fmt.Fprintf(w, "%-58s %14s  %-22s %s\n", "figure", "value", "goal", "rounds")
	fmt.Fprintf(w, "%-58s %14.0f  %-22s\n", "fill: InTx InsertOrders+UpdateOrders+AppendEvents, events/s", r.WritePerSec, "")
	fmt.Fprintf(w, "%-58s %14.0f  %-22s\n", "sequence: Store.Sequence (10000 per call), events/s", r.SequencePerSec, "")
	fmt.Fprintf(w, "%-58s %14.0f  %-22s %s\n", "catch-up 0 -> head, application.EventSubscriptions, ev/s", r.CatchUpDirectMed, "", rates(r.CatchUpDirect))
	fmt.Fprintf(w, "%-58s %14.0f  %-22s %s\n", "catch-up 0 -> head, EventService/Subscribe (gRPC), ev/s", r.CatchUpAPIMed, ">= 30000", rates(r.CatchUpAPI))
	fmt.Fprintf(w, "%-58s %14.0f  %-22s\n", fmt.Sprintf("live: written events/s (target %d)", r.LiveTargetRate), r.LiveWrittenRate, "")
	fmt.Fprintf(w, "%-58s %14s  %-22s\n", fmt.Sprintf("live: commit -> received p50 (%d events)", r.LiveEvents), fmt.Sprintf("%.2f ms", r.LiveP50Ms), "")
	fmt.Fprintf(w, "%-58s %14s  %-22s\n", "live: commit -> received p99", fmt.Sprintf("%.2f ms", r.LiveP99Ms), "<= 250 ms")
	fmt.Fprintf(w, "%-58s %14s  %-22s\n", "live: commit -> received max", fmt.Sprintf("%.2f ms", r.LiveMaxMs), "")
	if r.SaleSubscribers > 0 {
		fmt.Fprintf(w, "%-58s %14.0f  %-22s %s\n", "sale: PlaceOrder/s, no subscriber", r.SaleRateNoneMed, "", rates(r.SaleRateNone))
		fmt.Fprintf(w, "%-58s %14.0f  %-22s %s\n", fmt.Sprintf("sale: PlaceOrder/s, %d live subscribers", r.SaleSubscribers), r.SaleRateWithMed,
			">= 90 % of none", rates(r.SaleRateWith))
		if r.SaleRateNoneMed > 0 {
			fmt.Fprintf(w, "%-58s %13.1f%%  %-22s\n", "sale: with subscribers / none", 100*r.SaleRateWithMed/r.SaleRateNoneMed, ">= 90 %")
		}
	} else {
		fmt.Fprintln(w, "sale with live subscribers: not measured (--subscribers 0)")
	}
	if r.LoadBefore != "" {
		fmt.Fprintf(w, "machine load average (1 min): %s at the start, %s at the end\n", r.LoadBefore, r.LoadAfter)
	}
	b, _ := json.Marshal(r)
	fmt.Fprintf(w, "\n%s\n", b)
}

// benchOrder is one paid order as the service records it: its projection
// row after each version and its three events (ORDER_CREATED,
// ORDER_PAYMENT_STARTED, ORDER_PAID).
type benchOrder struct {
	snaps  [3]order.Snapshot
	events []order.Event
}

// eventRef names version v (1..3) of order i of a []benchOrder.
type eventRef struct {
	i int
	v int64
}

// benchOrders builds n paid orders of activity actID, users first+1...
func benchOrders(actID int64, first, n int, now time.Time) ([]benchOrder, error) {
	out := make([]benchOrder, n)
	for k := range out {
		u := int64(first + k + 1)
		id := fmt.Sprintf("%d_%d", actID, u)
		o, err := order.Create(order.NewOrder{OrderID: "ord_evb_" + id, ReservationID: "rsv_evb_" + id, MessageID: "evt_evb_" + id,
			ActivityID: actID, SKUID: 1, UserID: u, Quantity: 1, ReservedAt: now, PaymentTimeout: time.Hour}, now)
		if err != nil {
			return nil, fmt.Errorf("order %d: %w", k, err)
		}
		out[k].snaps[0] = o.Snapshot()
		if err := o.StartPayment("pay_evb_"+id, now); err != nil {
			return nil, fmt.Errorf("order %d: start payment: %w", k, err)
		}
		out[k].snaps[1] = o.Snapshot()
		if err := o.Pay("pay_evb_"+id, now); err != nil {
			return nil, fmt.Errorf("order %d: pay: %w", k, err)
		}
		out[k].snaps[2] = o.Snapshot()
		out[k].events = o.Changes()
		if len(out[k].events) != 3 {
			return nil, fmt.Errorf("order %d: %d events, want 3", k, len(out[k].events))
		}
	}
	return out, nil
}

// writeEventTx writes the events refs names in one transaction of the
// service's write path: InsertOrders for a version 1, UpdateOrders to the
// highest version of each order written, AppendEvents in refs' order (an
// order's versions must follow the stored ones).
func writeEventTx(ctx context.Context, store *postgres.Store, orders []benchOrder, refs []eventRef) error {
	var inserts, updates []order.Snapshot
	high := map[int]int64{}
	var seen []int
	events := make([]order.Event, 0, len(refs))
	for _, r := range refs {
		if r.v == 1 {
			inserts = append(inserts, orders[r.i].snaps[0])
		}
		if _, ok := high[r.i]; !ok {
			seen = append(seen, r.i)
		}
		high[r.i] = max(high[r.i], r.v)
		events = append(events, orders[r.i].events[r.v-1])
	}
	for _, i := range seen {
		if v := high[i]; v > 1 {
			updates = append(updates, orders[i].snaps[v-1])
		}
	}
	err := store.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		ok, err := tx.InsertOrders(ctx, inserts)
		if err != nil {
			return err
		}
		for i, in := range ok {
			if !in {
				return fmt.Errorf("order %s was not inserted", inserts[i].OrderID)
			}
		}
		if err := tx.UpdateOrders(ctx, updates); err != nil {
			return err
		}
		return tx.AppendEvents(ctx, events)
	})
	if err != nil {
		return fmt.Errorf("write %d events: %w", len(events), err)
	}
	return nil
}

// sequenceAll calls Store.Sequence until n events have positions (a call
// that sequences nothing waits for the fence: a transaction in flight
// anywhere in the cluster) and returns the head.
func sequenceAll(ctx context.Context, store *postgres.Store, n int64, within time.Duration) (int64, error) {
	deadline := time.Now().Add(within)
	var total int64
	for total < n {
		k, err := store.Sequence(ctx, 10_000)
		if err != nil {
			return 0, err
		}
		total += int64(k)
		if k == 0 {
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("sequenced %d of %d events within %s", total, n, within)
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	_, head, err := store.ReadEvents(ctx, n, ports.EventFilter{}, 1)
	if err != nil {
		return 0, err
	}
	if head != n {
		return 0, fmt.Errorf("the log's head is %d after sequencing %d events", head, n)
	}
	return head, nil
}

// streamCheck follows one subscriber's positions: strictly increasing and,
// from a start position, without a gap (the log's positions are dense).
type streamCheck struct {
	last  int64
	count int64
}

func (c *streamCheck) see(pos int64) error {
	if pos != c.last+1 {
		return fmt.Errorf("position %d after %d: the stream is not gapless and strictly increasing", pos, c.last)
	}
	c.last = pos
	c.count++
	return nil
}

// headSink is an EventSink that ends its subscription (cancel) once it saw
// position head.
type headSink struct {
	head   int64
	cancel context.CancelFunc
	check  streamCheck
	err    error
	done   bool
}

func (s *headSink) Event(_ context.Context, e ports.EventRecord) error {
	if s.done {
		return nil
	}
	if err := s.check.see(e.Position); err != nil {
		s.err = err
		s.done = true
		s.cancel()
		return err
	}
	if e.Position >= s.head {
		s.done = true
		s.cancel()
	}
	return nil
}

func (s *headSink) Checkpoint(context.Context, ports.Checkpoint) error { return nil }

// catchUpDirect reads the log from position 0 to head through
// application.EventSubscriptions and returns how long it took.
func catchUpDirect(ctx context.Context, subs *application.EventSubscriptions, head int64) (time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	sink := &headSink{head: head, cancel: cancel}
	start := time.Now()
	err := subs.Subscribe(sctx, 0, ports.EventFilter{}, sink)
	took := time.Since(start)
	switch {
	case sink.err != nil:
		return 0, sink.err
	case err != nil:
		return 0, err
	case !sink.done:
		return 0, fmt.Errorf("the subscription ended at position %d before the head %d (%w)", sink.check.last, head, ctx.Err())
	}
	return took, nil
}

// subscribe opens an EventService stream from position from.
func subscribe(ctx context.Context, client seckillv1connect.EventServiceClient, tok string, from int64) (*connect.ServerStreamForClient[seckillv1.SubscribeResponse], error) {
	req := connect.NewRequest(&seckillv1.SubscribeRequest{FromPosition: from})
	req.Header().Set("Authorization", "Bearer "+tok)
	return client.Subscribe(ctx, req)
}

// catchUpAPI reads the log from position 0 to head through
// EventService/Subscribe over gRPC and returns how long it took.
func catchUpAPI(ctx context.Context, client seckillv1connect.EventServiceClient, tok string, head int64) (time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	stream, err := subscribe(sctx, client, tok, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = stream.Close() }()
	var check streamCheck
	for check.last < head && stream.Receive() {
		if e := stream.Msg().GetEvent(); e != nil {
			if err := check.see(e.GetPosition()); err != nil {
				return 0, err
			}
		}
	}
	took := time.Since(start)
	if check.last < head {
		return 0, fmt.Errorf("the stream ended at position %d before the head %d: %w", check.last, head, stream.Err())
	}
	return took, nil
}

// liveDelivery attaches one API subscriber at head, writes paid orders of
// activity actID at rate events/s for d (each order created, then paid
// 50 orders later, as separate transactions of the write path) and
// returns, per written event, the time from its transaction's commit to
// its arrival at the subscriber, and the rate actually written.
func liveDelivery(ctx context.Context, store *postgres.Store, client seckillv1connect.EventServiceClient, tok string,
	actID int64, rate int, d time.Duration, head int64) (salekit.Latencies, float64, error) {
	orders, refs, err := liveEvents(actID, int(float64(rate)*d.Seconds()))
	if err != nil {
		return nil, 0, err
	}
	total := len(refs)
	sctx, cancel := context.WithTimeout(ctx, d+2*time.Minute)
	defer cancel()
	stream, err := subscribe(sctx, client, tok, head)
	if err != nil {
		return nil, 0, err
	}
	recv := receiveLive(stream, head, total)
	stopStream := func() { cancel(); _ = stream.Close(); recv.wg.Wait() }
	// The server answers the stream's headers once the subscription runs;
	// a short pause lets it read the (empty) head before writing starts.
	time.Sleep(time.Second)

	committed, written, err := writeAtRate(sctx, store, orders, refs, rate)
	if err != nil {
		stopStream()
		return nil, 0, err
	}
	recv.wg.Wait()
	stopStream()
	if recv.err != nil {
		return nil, 0, recv.err
	}
	lat := make(salekit.Latencies, 0, total)
	for id, c := range committed {
		r, ok := recv.received[id]
		if !ok {
			return nil, 0, fmt.Errorf("event %s was committed but not received", id)
		}
		lat = append(lat, max(0, r.Sub(c)))
	}
	return lat, written, nil
}

// liveEvents returns the paid orders of activity actID the live
// measurement writes and the order in which their first total events are
// written: each order created, then paid 50 orders later.
func liveEvents(actID int64, total int) ([]benchOrder, []eventRef, error) {
	const lag = 50
	orders, err := benchOrders(actID, 0, total/3+lag+1, time.Now())
	if err != nil {
		return nil, nil, err
	}
	refs := make([]eventRef, 0, total+3)
	for j := 0; len(refs) < total; j++ {
		refs = append(refs, eventRef{j, 1})
		if j >= lag {
			refs = append(refs, eventRef{j - lag, 2}, eventRef{j - lag, 3})
		}
	}
	return orders, refs[:total], nil
}

// liveReceiver is the reading side of the live measurement: the arrival
// time of every event by id, and the stream's error, both set by the
// goroutine it owns (read them after wg.Wait).
type liveReceiver struct {
	received map[string]time.Time
	err      error
	wg       sync.WaitGroup
}

// receiveLive starts the goroutine that reads total events from stream,
// checking their positions from head on, and returns its receiver.
func receiveLive(stream *connect.ServerStreamForClient[seckillv1.SubscribeResponse], head int64, total int) *liveReceiver {
	recv := &liveReceiver{received: make(map[string]time.Time, total)}
	recv.wg.Go(func() {
		check := streamCheck{last: head}
		for check.count < int64(total) && stream.Receive() {
			if e := stream.Msg().GetEvent(); e != nil {
				recv.received[e.GetEventId()] = time.Now()
				if err := check.see(e.GetPosition()); err != nil {
					recv.err = err
					return
				}
			}
		}
		if check.count < int64(total) {
			recv.err = fmt.Errorf("the stream ended after %d of %d events: %w", check.count, total, stream.Err())
		}
	})
	return recv
}

// writeAtRate writes the events refs of orders at rate events/s, on a
// 10 ms tick, each due batch in one transaction of the write path. It
// returns the commit time of every event by id and the rate actually
// written, or sctx's error when it ends first.
func writeAtRate(sctx context.Context, store *postgres.Store, orders []benchOrder, refs []eventRef, rate int) (map[string]time.Time, float64, error) {
	total := len(refs)
	committed := make(map[string]time.Time, total)
	const tick = 10 * time.Millisecond
	start := time.Now()
	next := 0
	for next < total {
		due := min(total, int(float64(rate)*time.Since(start).Seconds()))
		if due > next {
			batch := refs[next:due]
			if err := writeEventTx(sctx, store, orders, batch); err != nil {
				return nil, 0, err
			}
			at := time.Now()
			for _, r := range batch {
				e := orders[r.i].events[r.v-1]
				committed[order.EventID(e.OrderID, e.Version)] = at
			}
			next = due
		}
		select {
		case <-sctx.Done():
			return nil, 0, sctx.Err()
		case <-time.After(tick):
		}
	}
	return committed, float64(total) / time.Since(start).Seconds(), nil
}

// saleWithSubscribers measures PlaceOrder through the API with the whole
// service running (consumers creating the orders, the relay, the
// sequencer), with no subscriber and with o.subscribers live API
// subscribers, interleaved over o.rounds rounds, each level on a fresh
// activity.
func saleWithSubscribers(ctx context.Context, app *bootstrap.App, store *postgres.Store, client seckillv1connect.EventServiceClient, tok, base string,
	secret []byte, o eventsOptions, res *eventsResult) error {
	for r := range o.rounds {
		for _, subs := range []int{0, o.subscribers} {
			act := ports.Activity{ActivityID: salekit.BenchActivityID(), SKUID: 1, Stock: 10_000_000,
				StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
				PaymentTimeout: 15 * time.Minute, ReservationTTL: time.Hour}
			if _, err := app.Admin.CreateActivity(ctx, "system:bench", act); err != nil {
				return err
			}
			_, from, err := store.ReadEvents(ctx, math.MaxInt64, ports.EventFilter{}, 1)
			if err != nil {
				return err
			}
			stopSubs, err := liveSubscribers(ctx, client, tok, from, subs, app.Log)
			if err != nil {
				return err
			}
			pr, err := benchplace.Level(ctx, base, secret, act.ActivityID, act.ActivityID%1_000_000_000*10, o.saleClients, o.saleDuration)
			n := stopSubs()
			if err != nil {
				return err
			}
			if subs == 0 {
				res.SaleRateNone = append(res.SaleRateNone, pr.Rate())
			} else {
				res.SaleRateWith = append(res.SaleRateWith, pr.Rate())
				res.SaleSubscriberEvs += n
			}
			app.Log.Info("events bench: sale level", "round", r+1, "subscribers", subs, "place_per_sec", pr.Rate(),
				"errors", pr.Errors(), "events_delivered", n)
		}
	}
	res.SaleRateNoneMed, res.SaleRateWithMed = salekit.Median(res.SaleRateNone), salekit.Median(res.SaleRateWith)
	return nil
}

// liveSubscribers opens n API subscriptions from position from (the log's
// head: caught-up views), each read by a goroutine it owns. stop ends
// them, waits for them and returns the events they received in all (an
// error of a stream is logged: it ends that stream only).
func liveSubscribers(ctx context.Context, client seckillv1connect.EventServiceClient, tok string, from int64, n int, log *slog.Logger) (stop func() int64, err error) {
	var (
		mu    sync.Mutex
		count int64
		wg    sync.WaitGroup
	)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	for range n {
		stream, err := subscribe(sctx, client, tok, from)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Go(func() {
			defer func() { _ = stream.Close() }()
			for stream.Receive() {
				if stream.Msg().GetEvent() != nil {
					mu.Lock()
					count++
					mu.Unlock()
				}
			}
			if err := stream.Err(); err != nil && sctx.Err() == nil && !errors.Is(err, context.Canceled) {
				log.Warn("events bench: a live subscriber's stream ended", "error", err)
			}
		})
	}
	stop = func() int64 {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return count
	}
	return stop, nil
}
