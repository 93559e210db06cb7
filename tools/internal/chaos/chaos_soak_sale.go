package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// sale runs one activity of the soak from at: it creates the activity,
// lets the buyers arrive over spread while one payer pays and another
// cancels their shares of the orders as they are created (the rest run
// into the payment timeout), waits until the activity is at rest and
// checks I1-I7 on it.
func (s *soak) sale(ctx context.Context, at time.Time) soakActivity {
	a := soakActivity{ID: salekit.BenchActivityID(), StartedAtS: s.since(at)}
	if err := s.createActivity(ctx, a.ID, int64(s.o.stock), s.o.paymentTimeout, time.Hour); err != nil {
		a.Error = err.Error()
		return a
	}
	payTok, err := api.MintScopedToken(s.rig.secret, 900_000_001, []string{api.ScopePayment}, 2*time.Hour, time.Now())
	if err != nil {
		a.Error = err.Error()
		return a
	}
	rig := s.rig
	pay := &salekit.Payer{HTTP: rig.httpc, Bases: rig.bases, Pool: rig.pool, ActivityID: a.ID, To: s.o.payShare, Token: payTok}
	cancel := &salekit.Payer{HTTP: rig.httpc, Bases: rig.bases, Pool: rig.pool, ActivityID: a.ID, From: 1 - s.o.cancelShare, To: 1.1,
		Cancel: true, Secret: rig.secret}
	actCtx, stopActing := context.WithCancel(ctx)
	var acting sync.WaitGroup
	for _, p := range []*salekit.Payer{pay, cancel} {
		acting.Add(1)
		go func() { defer acting.Done(); p.Run(actCtx) }()
	}
	answers := s.buy(ctx, a.ID)
	rest, open, err := s.waitRest(ctx, a.ID, answers)
	stopActing()
	acting.Wait()
	a.RestS = rest.Sub(at).Seconds()
	a.Acknowledged, a.Paid, a.BuyerCancels = len(salekit.AcknowledgedIDs(answers)), pay.Paid.Load(), cancel.Paid.Load()
	if err != nil {
		a.Error = err.Error()
		if errors.Is(err, errNotAtRest) {
			a.Diagnosis = s.diagnose(ctx, a.ID)
		}
		return a
	}
	a.Invariants, a.Canceled, err = salekit.CheckActivityInvariants(ctx, rig.pool, rig.httpc, rig.bases, rig.secret, a.ID, s.o.stock, answers, open)
	if err != nil {
		a.Error = err.Error()
	}
	a.Violations = salekit.ViolationCount(a.Invariants)
	return a
}

// createActivity creates the activity through either instance, retrying
// for up to 60 s (a fault may be under way).
func (s *soak) createActivity(ctx context.Context, id, stock int64, paymentTimeout, window time.Duration) error {
	var err error
	for attempt := 0; attempt < 120; attempt++ {
		base := s.rig.bases[attempt%len(s.rig.bases)]
		if err = salekit.CreateActivityFor(ctx, s.rig.httpc, base, s.rig.secret, id, stock, paymentTimeout, 1, window); err == nil {
			return nil
		}
		sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	}
	return fmt.Errorf("create activity %d: %w", id, err)
}

// buy has o.buyers buyers arrive evenly over o.spread, o.clients at a
// time, each retrying its one request_id until a definite answer or until
// spread plus settle passed.
func (s *soak) buy(ctx context.Context, activityID int64) []salekit.BuyerAnswer {
	answers := make([]salekit.BuyerAnswer, s.o.buyers)
	buyCtx, cancel := context.WithTimeout(ctx, s.o.spread+s.o.settle)
	defer cancel()
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range s.o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= s.o.buyers || buyCtx.Err() != nil {
					return
				}
				sleepUntil(buyCtx, t0.Add(time.Duration(i)*s.o.spread/time.Duration(s.o.buyers)))
				answers[i] = salekit.BuyUntilDefinite(buyCtx, s.rig.httpc, s.rig.bases, s.rig.secret, activityID, int64(1_000_000+i),
					fmt.Sprintf("soak-%d-%d", activityID, i), nil)
			}
		}()
	}
	wg.Wait()
	return answers
}

// errNotAtRest is waitRest's error when the settle time ran out.
var errNotAtRest = errors.New("not at rest")

// waitRest waits until the activity is at rest: every acknowledged id an
// order or a rejection, no order left CREATED (paid, canceled or timed
// out), no reservation pending, no release in flight and no drift in the
// stock report. It gives up after the payment timeout plus settle and
// returns the acknowledged ids still open then.
func (s *soak) waitRest(ctx context.Context, activityID int64, answers []salekit.BuyerAnswer) (time.Time, int, error) {
	deadline := time.Now().Add(s.o.paymentTimeout + s.o.settle)
	ids := salekit.AcknowledgedIDs(answers)
	for {
		// A read that fails (a fault may have PostgreSQL down) is asked
		// again until the deadline.
		open, created, err := s.restState(ctx, activityID, ids)
		if err == nil && open == 0 && created == 0 {
			return time.Now(), 0, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Now(), open, fmt.Errorf("activity %d: %w after %s: %d acknowledged ids open, %d orders unpaid (last error: %v)",
				activityID, errNotAtRest, s.o.paymentTimeout+s.o.settle, open, created, err)
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
}

// restState reads the acknowledged ids still open and the activity's
// orders neither paid nor canceled; the stock report must show no
// reservation pending, no release in flight and no drift, or err says
// what it shows.
func (s *soak) restState(ctx context.Context, activityID int64, ids []string) (open int, created int64, err error) {
	if _, _, open, err = benchenv.ResolveIDs(ctx, s.rig.pool, ids); err != nil {
		return 0, 0, err
	}
	if err := s.rig.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE activity_id = $1 AND status NOT IN ('PAID', 'CANCELED')`,
		activityID).Scan(&created); err != nil {
		return open, 0, err
	}
	return open, created, s.booksAtRest(ctx, activityID)
}

// booksAtRest reads the activity's stock report (from the first instance
// that answers) and is nil when it shows no reservation pending, no
// release in flight and no drift.
func (s *soak) booksAtRest(ctx context.Context, activityID int64) error {
	var errs []error
	for _, base := range s.rig.bases {
		rep, err := salekit.StockReport(ctx, s.rig.httpc, base, s.rig.secret, activityID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rep.GetPendingReservations() != 0 || rep.GetReleasesInFlight() != 0 || rep.GetDrift() != 0 {
			return fmt.Errorf("stock report: %d pending, %d releases in flight, drift %d",
				rep.GetPendingReservations(), rep.GetReleasesInFlight(), rep.GetDrift())
		}
		return nil
	}
	return fmt.Errorf("stock report: %w", errors.Join(errs...))
}

// soakProbe measures recovery: after a fault it places orders for new
// buyers on an activity of its own (stock enough for the whole soak, a
// payment timeout longer than it) until one is acknowledged, and reports
// when that order was created in PostgreSQL.
type soakProbe struct {
	id      int64
	at      time.Time
	next    atomic.Int64
	mu      sync.Mutex
	answers []salekit.BuyerAnswer
}

func newSoakProbe(ctx context.Context, s *soak) (*soakProbe, error) {
	p := &soakProbe{id: salekit.BenchActivityID(), at: time.Now()}
	window := s.o.duration + s.o.paymentTimeout + s.o.settle + time.Hour
	return p, s.createActivity(ctx, p.id, 1_000_000, window, window)
}

// recovery is the time from backAt until the first order placed after it
// was created, waiting at most 120 s.
func (p *soakProbe) recovery(ctx context.Context, s *soak, backAt time.Time) (time.Duration, error) {
	pctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	var last string
	for pctx.Err() == nil {
		user := 5_000_000 + p.next.Add(1)
		a := salekit.BuyUntilDefinite(pctx, s.rig.httpc, s.rig.bases, s.rig.secret, p.id, user, fmt.Sprintf("probe-%d", user), nil)
		p.mu.Lock()
		p.answers = append(p.answers, a)
		p.mu.Unlock()
		if a.OrderID == "" {
			continue
		}
		last = a.OrderID
		for pctx.Err() == nil {
			var created time.Time
			err := s.rig.pool.QueryRow(pctx, `SELECT created_at FROM orders WHERE order_id = $1`, a.OrderID).Scan(&created)
			if err == nil {
				return max(0, created.Sub(backAt)), nil
			}
			sleepUntil(pctx, time.Now().Add(50*time.Millisecond))
		}
	}
	if last != "" {
		return time.Since(backAt), fmt.Errorf("no order placed after the fault was created within 120 s (order %s acknowledged, not in PostgreSQL)", last)
	}
	return time.Since(backAt), fmt.Errorf("no order placed after the fault was created within 120 s (none acknowledged)")
}

// activity checks I1-I7 on the probe's activity once the soak is over
// (its orders stay CREATED: nobody pays them, and their timeout is
// longer than the soak).
func (p *soakProbe) activity(ctx context.Context, s *soak) soakActivity {
	a := soakActivity{ID: p.id, Probe: true, StartedAtS: s.since(p.at)}
	p.mu.Lock()
	answers := p.answers
	p.mu.Unlock()
	ids := salekit.AcknowledgedIDs(answers)
	a.Acknowledged = len(ids)
	deadline := time.Now().Add(s.o.settle)
	var open int
	for {
		var err error
		if _, _, open, err = benchenv.ResolveIDs(ctx, s.rig.pool, ids); err != nil {
			a.Error = err.Error()
			return a
		}
		if (open == 0 && s.booksAtRest(ctx, p.id) == nil) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
	a.RestS = s.since(time.Now()) - a.StartedAtS
	var err error
	a.Invariants, a.Canceled, err = salekit.CheckActivityInvariants(ctx, s.rig.pool, s.rig.httpc, s.rig.bases, s.rig.secret, p.id, 1_000_000, answers, open)
	if err != nil {
		a.Error = err.Error()
	}
	a.Violations = salekit.ViolationCount(a.Invariants)
	return a
}
