package salekit

import (
	"context"
	"fmt"
	"net/http"
	"time"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
)

// InvariantCheck is one invariant's verdict on the sale.
type InvariantCheck struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Checked    bool   `json:"checked"`
	Violations int64  `json:"violations"`
	Detail     string `json:"detail"`
}

// StockCheck is I6 from the service's stock report: the books of Redis and
// of PostgreSQL each add up to the initial stock. Without a report (err)
// it is not checked and says why.
func StockCheck(rep *seckillv1.StockReport, err error) InvariantCheck {
	i6 := InvariantCheck{ID: "I6", Name: "stock is conserved at rest"}
	if err != nil {
		i6.Detail = "not checked: stock report: " + err.Error()
		return i6
	}
	drift, pgBook := rep.GetDrift(), rep.GetInitialStock()-rep.GetPgFinalStock()-rep.GetNonCanceledOrders()
	i6.Checked = true
	i6.Violations = abs64(drift) + abs64(pgBook) + max(0, -rep.GetRedisAvailable())
	i6.Detail = fmt.Sprintf("initial %d = Redis available %d + pending %d + live orders %d + releases in flight %d (drift %d); PostgreSQL final stock %d + live orders = initial (off by %d)",
		rep.GetInitialStock(), rep.GetRedisAvailable(), rep.GetPendingReservations(), rep.GetNonCanceledOrders(),
		rep.GetReleasesInFlight(), drift, rep.GetPgFinalStock(), pgBook)
	return i6
}

// StockReport reads the I6 terms through AdminService.GetStockReport.
func StockReport(ctx context.Context, httpc *http.Client, base string, secret []byte, activityID int64) (*seckillv1.StockReport, error) {
	tok, err := api.MintToken(secret, 1, true, time.Hour, time.Now())
	if err != nil {
		return nil, err
	}
	admin := seckillv1connect.NewAdminServiceClient(httpc, base)
	req := connect.NewRequest(&seckillv1.GetStockReportRequest{ActivityId: activityID, SkuId: 1})
	req.Header().Set("Authorization", "Bearer "+tok)
	res, err := admin.GetStockReport(ctx, req)
	if err != nil {
		return nil, err
	}
	return res.Msg.GetReport(), nil
}

// CheckActivityInvariants checks I1-I7 (docs/invariants.md) on one
// activity's sale at rest: the books in PostgreSQL, the buyers' answers
// and the service's stock report, asked of the first instance at bases
// that answers. open is the number of acknowledged ids that were neither
// an order nor a rejection when the settle time ended. It also returns
// the orders canceled (by their timeout or their buyer).
func CheckActivityInvariants(ctx context.Context, pool *pgxpool.Pool, httpc *http.Client, bases []string, secret []byte,
	activityID int64, stock int, answers []BuyerAnswer, open int) ([]InvariantCheck, int, error) {
	ids := AcknowledgedIDs(answers)
	books, err := benchenv.ReadSaleBooks(ctx, pool, activityID, ids)
	if err != nil {
		return nil, 0, err
	}
	var paidCanceled, doubleRelease, canceled, paid int64
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT count(DISTINCT p.aggregate_id) FROM order_events p JOIN order_events c
		          ON c.aggregate_id = p.aggregate_id AND c.event_type = 'ORDER_CANCELED'
		         JOIN orders o ON o.order_id = p.aggregate_id AND o.activity_id = $1
		         WHERE p.event_type = 'ORDER_PAID'),
		       (SELECT count(*) FROM (SELECT reservation_id FROM inventory_ledger WHERE activity_id = $1
		          AND delta > 0 GROUP BY reservation_id HAVING count(*) > 1) d),
		       (SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'CANCELED'),
		       (SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'PAID')`,
		activityID).Scan(&paidCanceled, &doubleRelease, &canceled, &paid); err != nil {
		return nil, 0, fmt.Errorf("check the invariants: %w", err)
	}
	var rep *seckillv1.StockReport
	var repErr error
	for _, base := range bases {
		if rep, repErr = StockReport(ctx, httpc, base, secret, activityID); repErr == nil {
			break
		}
	}
	i6 := StockCheck(rep, repErr)
	if !i6.Checked {
		i6.Violations = 1 // the sale is at rest: every instance's report failing is a failure here
	}
	checks := []InvariantCheck{
		{ID: "I1", Name: "no oversell", Checked: true, Violations: max(0, books.Live-int64(stock)) + books.NoStock,
			Detail: fmt.Sprintf("%d live orders for %d units; %d acknowledged reservations found no final stock", books.Live, stock, books.NoStock)},
		{ID: "I2", Name: "one live order per buyer", Checked: true, Violations: books.DupUsers,
			Detail: fmt.Sprintf("%d users with more than one live order", books.DupUsers)},
		{ID: "I3", Name: "one effect per message", Checked: true, Violations: books.DupEffects,
			Detail: fmt.Sprintf("%d message ids with more than one ORDER_CREATED ledger entry", books.DupEffects)},
		{ID: "I4", Name: "one compensation per reservation", Checked: true, Violations: doubleRelease,
			Detail: fmt.Sprintf("%d orders canceled (by their timeout or their buyer); %d reservations given back more than once", canceled, doubleRelease)},
		{ID: "I5", Name: "a paid order is never canceled", Checked: true, Violations: paidCanceled,
			Detail: fmt.Sprintf("%d orders paid; %d paid orders with a cancel event", paid, paidCanceled)},
		i6,
		{ID: "I7", Name: "nothing acknowledged is lost", Checked: true, Violations: int64(open),
			Detail: fmt.Sprintf("%d acknowledged order ids: every one an order or a rejection, %d neither", len(ids), open)},
	}
	return checks, int(canceled), nil
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// ViolationCount sums the violations of checks.
func ViolationCount(checks []InvariantCheck) int64 {
	var n int64
	for _, c := range checks {
		n += c.Violations
	}
	return n
}
