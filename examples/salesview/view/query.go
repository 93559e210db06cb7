package view

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/adapters/projector"
)

// MaxHistory is the largest limit History accepts.
const MaxHistory = 1000

// ErrNoActiveView is returned by ActiveView while no version of the view
// has finished its first catch-up: there is nothing consistent to read yet.
var ErrNoActiveView = errors.New("salesview: no active version yet (the view is still catching up)")

// ErrInvalidLimit is returned by History for a limit outside 1..MaxHistory.
var ErrInvalidLimit = errors.New("limit must be between 1 and 1000")

// Querier runs a query: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Total is one activity's counters over every minute of the view.
type Total struct {
	ActivityID int64 `json:"activity_id"`
	// Accepted, Paid and Canceled count the orders created, paid and
	// canceled, priced or not.
	Accepted int64 `json:"accepted"`
	Paid     int64 `json:"paid"`
	Canceled int64 `json:"canceled"`
	// Revenue is the sum of unit_price*quantity of the paid orders with a
	// known price, per currency, in minor units (cents).
	Revenue map[string]int64 `json:"revenue"`
	// UnpricedPaid counts the paid orders whose price is unknown: they are
	// not in Revenue (not free, unknown).
	UnpricedPaid int64 `json:"unpriced_paid"`
}

// Minute is one row of the minutes table: one activity, one minute (UTC),
// one currency ("" for the orders whose price is unknown).
type Minute struct {
	Minute   time.Time `json:"minute"`
	Currency string    `json:"currency"`
	Accepted int64     `json:"accepted"`
	Paid     int64     `json:"paid"`
	Canceled int64     `json:"canceled"`
	Revenue  int64     `json:"revenue"`
}

// Order is one order of a buyer's history, as of the last event applied.
type Order struct {
	OrderID      string    `json:"order_id"`
	UserID       int64     `json:"user_id"`
	ActivityID   int64     `json:"activity_id"`
	SKUID        int64     `json:"sku_id"`
	Status       string    `json:"status"`
	UnitPrice    int64     `json:"unit_price"`
	Currency     string    `json:"currency"`
	Quantity     int32     `json:"quantity"`
	CancelReason string    `json:"cancel_reason,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	LastVersion  int64     `json:"last_version"`
}

// ActiveView returns the version of the view named name that readers should
// read (the kit's active version, not rebuilding), or an error wrapping
// ErrNoActiveView when no version is active yet.
func ActiveView(ctx context.Context, store *projector.Store, name string) (projector.View, error) {
	version, ok, err := store.Active(ctx, name)
	if err != nil {
		return projector.View{}, fmt.Errorf("salesview: active version of %s: %w", name, err)
	}
	if !ok {
		return projector.View{}, fmt.Errorf("%s: %w", name, ErrNoActiveView)
	}
	return projector.View{Name: name, Version: version}, nil
}

// Books returns, per activity and per status (CREATED, PAYING, PAID,
// CANCELED), how many orders of version v are in that status. An activity
// without orders is absent.
func Books(ctx context.Context, q Querier, v projector.View) (map[int64]map[string]int64, error) {
	rows, err := q.Query(ctx, `SELECT activity_id, status, count(*) FROM `+v.Table("orders")+` GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("salesview: books: %w", err)
	}
	books := map[int64]map[string]int64{}
	var (
		activity, n int64
		status      string
	)
	_, err = pgx.ForEachRow(rows, []any{&activity, &status, &n}, func() error {
		if books[activity] == nil {
			books[activity] = map[string]int64{}
		}
		books[activity][status] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("salesview: books: %w", err)
	}
	return books, nil
}

// Totals returns every activity's counters of version v, summed over its
// minutes. An activity without events is absent.
func Totals(ctx context.Context, q Querier, v projector.View) (map[int64]Total, error) {
	rows, err := q.Query(ctx, `SELECT activity_id, currency, sum(accepted), sum(paid), sum(canceled), sum(revenue)
		FROM `+v.Table("minutes")+` GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("salesview: totals: %w", err)
	}
	totals := map[int64]Total{}
	var (
		activity, accepted, paid, canceled, revenue int64
		currency                                    string
	)
	_, err = pgx.ForEachRow(rows, []any{&activity, &currency, &accepted, &paid, &canceled, &revenue}, func() error {
		t, ok := totals[activity]
		if !ok {
			t = Total{ActivityID: activity, Revenue: map[string]int64{}}
		}
		t.Accepted += accepted
		t.Paid += paid
		t.Canceled += canceled
		if currency == "" {
			t.UnpricedPaid += paid
		} else {
			t.Revenue[currency] += revenue
		}
		totals[activity] = t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("salesview: totals: %w", err)
	}
	return totals, nil
}

// Minutes returns the minutes of one activity in version v, oldest first
// (and by currency within a minute); empty for an activity without events.
func Minutes(ctx context.Context, q Querier, v projector.View, activityID int64) ([]Minute, error) {
	rows, err := q.Query(ctx, `SELECT minute, currency, accepted, paid, canceled, revenue FROM `+v.Table("minutes")+
		` WHERE activity_id = $1 ORDER BY minute, currency`, activityID)
	if err != nil {
		return nil, fmt.Errorf("salesview: minutes of activity %d: %w", activityID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Minute, error) {
		var m Minute
		err := r.Scan(&m.Minute, &m.Currency, &m.Accepted, &m.Paid, &m.Canceled, &m.Revenue)
		m.Minute = m.Minute.UTC()
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("salesview: minutes of activity %d: %w", activityID, err)
	}
	return out, nil
}

// History returns up to limit (1..MaxHistory) orders of the buyer userID in
// version v, newest first (by created_at, then order id); a limit outside
// that range is an error wrapping ErrInvalidLimit.
func History(ctx context.Context, q Querier, v projector.View, userID int64, limit int) ([]Order, error) {
	if limit < 1 || limit > MaxHistory {
		return nil, fmt.Errorf("salesview: history: limit %d: %w", limit, ErrInvalidLimit)
	}
	rows, err := q.Query(ctx, `SELECT order_id, user_id, activity_id, sku_id, status, unit_price, currency, quantity,
			cancel_reason, created_at, updated_at, last_version
		FROM `+v.Table("orders")+` WHERE user_id = $1 ORDER BY created_at DESC, order_id DESC LIMIT $2`, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("salesview: history of user %d: %w", userID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Order, error) {
		var o Order
		err := r.Scan(&o.OrderID, &o.UserID, &o.ActivityID, &o.SKUID, &o.Status, &o.UnitPrice, &o.Currency,
			&o.Quantity, &o.CancelReason, &o.CreatedAt, &o.UpdatedAt, &o.LastVersion)
		o.CreatedAt, o.UpdatedAt = o.CreatedAt.UTC(), o.UpdatedAt.UTC()
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("salesview: history of user %d: %w", userID, err)
	}
	return out, nil
}
