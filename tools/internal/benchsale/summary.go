package benchsale

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/procstat"
	"github.com/seckill-dev/seckill/tools/internal/reserveceiling"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// Result is everything result.json holds: the settings, the command
// line, the broker, the machine (cores, Go version), when the sale
// started and its activity, the sampled processes (and a note on those
// that were not), the time series, the summary, the invariants' verdicts
// and the number of violations among them.
type Result struct {
	Settings    Options                  `json:"settings"`
	Command     string                   `json:"command"`
	Broker      string                   `json:"broker"`
	Cores       int                      `json:"cores"`
	GoVersion   string                   `json:"go_version"`
	StartedAt   time.Time                `json:"started_at"`
	ActivityID  int64                    `json:"activity_id"`
	Processes   []string                 `json:"processes"`
	ProcessNote string                   `json:"process_note,omitempty"`
	Series      []Sample                 `json:"series"`
	Summary     Summary                  `json:"summary"`
	Invariants  []salekit.InvariantCheck `json:"invariants"`
	Violations  int64                    `json:"violations"`
}

// Summary holds the figures of the whole sale. Times are seconds; P3 is
// the time of the last committed order (max orders.created_at, the
// database's now() at the start of its order-create transaction) minus
// the client's receive time of the last accepted reservation (the first
// answer carrying the last new order id), both on this host's clock.
// Drain is the same order time minus the end of the load (the last
// answer of any kind), 0 when the orders kept pace with the load.
// RelayDrain is the time the bench saw the outbox empty (it counts the
// unpublished rows every 250 ms once the backlog drained) minus the end
// of the load; it is set only when the outbox drained. LastPublishedAt
// is max(event_outbox.published_at): the start of the relay transaction
// that published the last row, up to one send earlier than the row's
// commit. The CPU figures cover the sale from the first call until the
// backlog and the outbox drained (or --settle ran out), the relay's
// sends included.
type Summary struct {
	LoadSeconds       float64            `json:"load_seconds"`
	SellingSeconds    float64            `json:"selling_seconds"`
	Answers           map[string]int64   `json:"answers"`
	AnswersPerSec     map[string]float64 `json:"answers_per_sec"`
	OtherByCode       map[string]int     `json:"other_by_code"`
	CallsPerSec       float64            `json:"calls_per_sec"`
	SellingRatePerSec float64            `json:"selling_rate_per_sec"`
	AcceptedOrders    int                `json:"accepted_orders"`
	OrdersCommitted   int64              `json:"orders_committed"`
	Rejected          int                `json:"rejected"`
	Drained           bool               `json:"drained"`
	P3Seconds         float64            `json:"p3_seconds"`
	DrainSeconds      float64            `json:"drain_seconds"`
	// OutboxUnpublishedAtLoadEnd and OutboxUnpublishedAtEnd are the
	// outbox rows not yet published when the load ended and when the
	// bench stopped waiting.
	OutboxUnpublishedAtLoadEnd int64              `json:"outbox_unpublished_at_load_end"`
	OutboxUnpublishedAtEnd     int64              `json:"outbox_unpublished_at_end"`
	OutboxDrained              bool               `json:"outbox_drained"`
	RelayDrainSeconds          float64            `json:"relay_drain_seconds"`
	LastPublishedAt            time.Time          `json:"last_published_at"`
	LastAcceptedAt             time.Time          `json:"last_accepted_at"`
	LoadEndAt                  time.Time          `json:"load_end_at"`
	LastOrderAt                time.Time          `json:"last_order_at"`
	PlaceP50Ms                 float64            `json:"place_p50_ms"`
	PlaceP99Ms                 float64            `json:"place_p99_ms"`
	MeasuredSeconds            float64            `json:"measured_seconds"`
	CPUSeconds                 map[string]float64 `json:"cpu_seconds"`
	CPUMicrosPerOrder          map[string]float64 `json:"cpu_us_per_order"`
	CPUMicrosPerOrderAll       float64            `json:"cpu_us_per_order_all"`
	// SoldOutPhasePerSec is the answers per second from the last
	// accepted answer to the end of the load (every buyer then hears
	// sold out or already purchased).
	SoldOutPhasePerSec float64 `json:"sold_out_phase_per_sec"`
	// SellingCPUMicrosPerOrder is the CPU per accepted order of the
	// sampling intervals up to the one holding the last accepted answer:
	// the selling phase alone, without the sold-out answers after it.
	SellingCPUMicrosPerOrder    map[string]float64 `json:"selling_cpu_us_per_order"`
	SellingCPUMicrosPerOrderAll float64            `json:"selling_cpu_us_per_order_all"`
	Ceilings                    Ceilings           `json:"ceilings"`
}

// summarizeSale computes the summary from the load, the sampler and the
// scratch database.
func summarizeSale(ctx context.Context, pool *pgxpool.Pool, load *saleload.Load, smp *saleSampler, activityID int64, loadEnd time.Time, st saleSettle) (Summary, error) {
	ids, lastAccepted := load.AcceptedIDs()
	s := Summary{Drained: st.backlog, OutboxDrained: st.outbox, OutboxUnpublishedAtLoadEnd: st.unpublishedAtLoadEnd,
		OutboxUnpublishedAtEnd: st.unpublishedAtEnd, LoadEndAt: loadEnd, LastAcceptedAt: lastAccepted, AcceptedOrders: len(ids),
		Answers: map[string]int64{}, AnswersPerSec: map[string]float64{}, OtherByCode: map[string]int{},
		CPUSeconds: map[string]float64{}, CPUMicrosPerOrder: map[string]float64{}, SellingCPUMicrosPerOrder: map[string]float64{}}
	s.LoadSeconds = loadEnd.Sub(smp.t0).Seconds()
	s.countAnswers(load, smp.t0, len(ids), lastAccepted)
	if err := s.readBooks(ctx, pool, ids, activityID, loadEnd, lastAccepted, st); err != nil {
		return s, err
	}
	s.addCPU(smp, len(ids))
	// The sold-out phase: from the last accepted answer to the end of
	// the load.
	if d := loadEnd.Sub(lastAccepted).Seconds(); d > 0 && !lastAccepted.IsZero() {
		s.SoldOutPhasePerSec = float64(load.AnsweredAfter(lastAccepted)) / d
	}
	s.addSellingCPU(smp, len(ids))
	return s, nil
}

// countAnswers fills in the answers of the load by outcome and their
// rates, the selling phase's length from start and rate (accepted orders
// up to lastAccepted), the other answers by code and PlaceOrder's
// latency.
func (s *Summary) countAnswers(load *saleload.Load, start time.Time, accepted int, lastAccepted time.Time) {
	cnt := load.Counts()
	for name, n := range map[string]int64{saleload.Accepted: cnt.Accepted, saleload.SoldOut: cnt.SoldOut,
		saleload.AlreadyPurchased: cnt.AlreadyPurchased, saleload.Other: cnt.Other} {
		s.Answers[name] = n
		if s.LoadSeconds > 0 {
			s.AnswersPerSec[name] = float64(n) / s.LoadSeconds
		}
	}
	if s.LoadSeconds > 0 {
		s.CallsPerSec = float64(cnt.Total()) / s.LoadSeconds
	}
	if !lastAccepted.IsZero() {
		s.SellingSeconds = lastAccepted.Sub(start).Seconds()
		if s.SellingSeconds > 0 {
			s.SellingRatePerSec = float64(accepted) / s.SellingSeconds
		}
	}
	for k, v := range load.OtherByCode() {
		s.OtherByCode[k] = v
	}
	all := load.Latencies()
	s.PlaceP50Ms, s.PlaceP99Ms = float64(all.Percentile(0.50))/1e6, float64(all.Percentile(0.99))/1e6
}

// readBooks reads from the scratch database the sale's committed orders
// (how many, the last one's time, P3 and the drain after loadEnd), how
// many of the accepted ids were rejected, and, when the outbox drained,
// the relay's drain time and last publication.
func (s *Summary) readBooks(ctx context.Context, pool *pgxpool.Pool, ids []string, activityID int64, loadEnd, lastAccepted time.Time, st saleSettle) error {
	var last *time.Time
	if err := pool.QueryRow(ctx, `SELECT count(*), max(created_at) FROM orders WHERE activity_id = $1`, activityID).
		Scan(&s.OrdersCommitted, &last); err != nil {
		return fmt.Errorf("count the sale's orders: %w", err)
	}
	if last != nil {
		s.LastOrderAt = *last
		if !lastAccepted.IsZero() {
			s.P3Seconds = last.Sub(lastAccepted).Seconds()
		}
		s.DrainSeconds = max(0, last.Sub(loadEnd).Seconds())
	}
	_, rejected, _, err := benchenv.ResolveIDs(ctx, pool, ids)
	if err != nil {
		return fmt.Errorf("count rejections: %w", err)
	}
	s.Rejected = rejected
	if st.outbox {
		s.RelayDrainSeconds = max(0, st.outboxAt.Sub(loadEnd).Seconds())
		var published *time.Time
		if err := pool.QueryRow(ctx, `SELECT max(published_at) FROM event_outbox`).Scan(&published); err != nil {
			return fmt.Errorf("read the last outbox publication: %w", err)
		}
		if published != nil {
			s.LastPublishedAt = *published
		}
	}
	return nil
}

// addCPU fills in the measured time and every sampled process's CPU
// seconds over it, and, with accepted orders, the CPU per order.
func (s *Summary) addCPU(smp *saleSampler, accepted int) {
	s.MeasuredSeconds = smp.lastAt.Sub(smp.t0).Seconds()
	var total float64
	for _, p := range smp.procs {
		sec := float64(p.Last-p.First) / procstat.ClockTicks
		s.CPUSeconds[p.Name] = sec
		total += sec
		if accepted > 0 {
			s.CPUMicrosPerOrder[p.Name] = sec * 1e6 / float64(accepted)
		}
	}
	if accepted > 0 {
		s.CPUMicrosPerOrderAll = total * 1e6 / float64(accepted)
	}
}

// addSellingCPU fills in, with accepted orders, the CPU per accepted
// order of the sampling intervals up to the one holding the last accepted
// answer (SellingSeconds): the selling phase alone.
func (s *Summary) addSellingCPU(smp *saleSampler, accepted int) {
	if accepted == 0 {
		return
	}
	prev := 0.0
	for _, smp := range smp.series {
		dt := smp.T - prev
		prev = smp.T
		if smp.T-dt >= s.SellingSeconds {
			break
		}
		for name, cores := range smp.CPUCores {
			us := cores * dt * 1e6 / float64(accepted)
			s.SellingCPUMicrosPerOrder[name] += us
			s.SellingCPUMicrosPerOrderAll += us
		}
	}
}

// checkSaleInvariants checks docs/invariants.md on the settled sale:
// I1-I3, I6 and I7 from the scratch database, the client's answers and
// the service's stock report (AdminService.GetStockReport, a read); I4
// and I5 are named as not checked on their own.
func checkSaleInvariants(ctx context.Context, pool *pgxpool.Pool, httpc *http.Client, base string, secret []byte, load *saleload.Load, activityID int64, stock int) ([]salekit.InvariantCheck, error) {
	ids, _ := load.AcceptedIDs()
	books, err := benchenv.ReadSaleBooks(ctx, pool, activityID, ids)
	if err != nil {
		return nil, fmt.Errorf("check the invariants: %w", err)
	}
	live, noStock, dupUsers, dupEffects := books.Live, books.NoStock, books.DupUsers, books.DupEffects
	orders, rejected, open, err := benchenv.ResolveIDs(ctx, pool, ids)
	if err != nil {
		return nil, fmt.Errorf("check the invariants: %w", err)
	}
	twoOrders, changedRetry := load.IdempotencyBreaks()

	rep, repErr := salekit.StockReport(ctx, httpc, base, secret, activityID)
	i6 := salekit.StockCheck(rep, repErr)
	return []salekit.InvariantCheck{
		{ID: "I1", Name: "no oversell", Checked: true, Violations: max(0, live-int64(stock)) + noStock,
			Detail: fmt.Sprintf("%d live orders for %d units; %d accepted reservations found no final stock", live, stock, noStock)},
		{ID: "I2", Name: "one live order per buyer", Checked: true, Violations: dupUsers + int64(twoOrders),
			Detail: fmt.Sprintf("%d users with more than one live order; %d buyers told two different order ids", dupUsers, twoOrders)},
		{ID: "I3", Name: "one effect per message", Checked: true, Violations: dupEffects,
			Detail: fmt.Sprintf("%d message ids with more than one ORDER_CREATED ledger entry", dupEffects)},
		{ID: "I4", Name: "one compensation per reservation",
			Detail: "not checked on its own: a sale that settles releases nothing unless a reservation is rejected; a second release would show in I6 as Redis stock above the books"},
		{ID: "I5", Name: "a paid order is never canceled", Detail: "not exercised: nobody pays in this benchmark"},
		i6,
		{ID: "I7", Name: "nothing acknowledged is lost", Checked: true, Violations: int64(open),
			Detail: fmt.Sprintf("%d accepted order ids: %d orders, %d rejections, %d neither", len(ids), orders, rejected, open)},
		{ID: "API", Name: "a retried request_id keeps its answer", Checked: true, Violations: int64(changedRetry),
			Detail: fmt.Sprintf("%d retries of an accepted request_id refused", changedRetry)},
	}, nil
}

// Ceilings are the ceilings measured after the sale, from Clients
// clients: the reserve script alone (ReservePerSec and its latencies) and
// a bare synchronous send loop (SendPerSec, its latencies and the sends
// whose outcome was unknown or rejected); MinPerSec is the lower of the
// two.
type Ceilings struct {
	Clients       int     `json:"clients"`
	ReservePerSec float64 `json:"reserve_per_sec"`
	ReserveP50Ms  float64 `json:"reserve_p50_ms"`
	ReserveP99Ms  float64 `json:"reserve_p99_ms"`
	SendPerSec    float64 `json:"send_per_sec"`
	SendP50Ms     float64 `json:"send_p50_ms"`
	SendP99Ms     float64 `json:"send_p99_ms"`
	SendUnknown   int     `json:"send_unknown"`
	SendRejected  int     `json:"send_rejected"`
	MinPerSec     float64 `json:"min_per_sec"`
	// SellingRatio is the sale's selling rate (accepted reservations per
	// second until the last one) over MinPerSec; CallsRatio is every
	// PlaceOrder answer per second over MinPerSec.
	SellingRatio float64 `json:"selling_ratio"`
	CallsRatio   float64 `json:"calls_ratio"`
}

// rate fills the ratios from the summary.
func (c *Ceilings) rate(s Summary) {
	c.MinPerSec = min(c.ReservePerSec, c.SendPerSec)
	if c.MinPerSec > 0 {
		c.SellingRatio = s.SellingRatePerSec / c.MinPerSec
		c.CallsRatio = s.CallsPerSec / c.MinPerSec
	}
}

// measureSaleCeilings measures the reserve script alone (EVALSHA on the
// scratch Redis database) and a bare synchronous send loop to the scratch
// order-create topic, as `seckill-bench place` does.
func measureSaleCeilings(ctx context.Context, sc *benchenv.Scratch, log *slog.Logger, o Options) (Ceilings, error) {
	c := Ceilings{Clients: o.CeilingClients}
	store, err := redis.New(sc.Redis, redis.Config{Namespace: sc.Config.Redis.Namespace}, nil, log)
	if err != nil {
		return c, fmt.Errorf("reserve ceiling: %w", err)
	}
	rr, err := reserveceiling.Measure(ctx, store, reserveceiling.Options{ActivityID: salekit.BenchActivityID(), SKUID: 1, Reservations: o.CeilingCalls, Clients: o.CeilingClients})
	if err != nil {
		return c, fmt.Errorf("reserve ceiling: %w", err)
	}
	c.ReservePerSec, c.ReserveP50Ms, c.ReserveP99Ms = rr.PerSecond, float64(rr.P50)/1e6, float64(rr.P99)/1e6

	pub, closePub, err := sc.Env.Publisher(ctx, sc.Config.Broker.Neutral.SendTimeout, log)
	if err != nil {
		return c, fmt.Errorf("send ceiling: %w", err)
	}
	defer closePub()
	sl, err := benchkit.SendLoop(ctx, pub, max(1, o.CeilingCalls/3), o.CeilingClients, func(i int) ports.OutboundMessage {
		id := fmt.Sprintf("evt_sale_ceiling_%d_%d", time.Now().UnixNano(), i)
		return ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: id, Tag: message.TagCreateOrder,
			Keys: []string{id}, Body: []byte(`{"bench":true}`)}
	})
	if err != nil {
		return c, fmt.Errorf("send ceiling: %w", err)
	}
	c.SendPerSec, c.SendP50Ms, c.SendP99Ms = sl.Rate(), float64(sl.Percentile(0.50))/1e6, float64(sl.Percentile(0.99))/1e6
	c.SendUnknown, c.SendRejected = sl.Unknown, sl.Rejected
	return c, nil
}
