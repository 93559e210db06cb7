package salekit

import (
	"context"
	"hash/fnv"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Payer pays a share of the activity's orders through the payment side
// (PayOrder with a payment-scoped token) as they are created, spread over
// the API instances at bases; the others run into their payment timeout.
// An order is chosen when the FNV hash of its id, read as a fraction of
// 1, falls in [from, to), so the choice does not depend on timing. With
// cancel set it cancels the chosen orders instead (CancelOrder with the
// buyer's own token, signed with secret): two payers with disjoint
// ranges pay some orders and cancel others.
type Payer struct {
	// HTTP calls the API instances at Bases, one after the other.
	HTTP  *http.Client
	Bases []string
	// Pool reads the activity's CREATED orders.
	Pool       *pgxpool.Pool
	ActivityID int64
	// From and To bound the share of orders chosen: [From, To) of 1.
	From, To float64
	// Token is the payment-scoped token of PayOrder.
	Token string
	// Cancel cancels the chosen orders with their buyer's token, signed
	// with Secret, instead of paying them.
	Cancel bool
	Secret []byte
	// Paid counts the orders paid (or canceled) so far.
	Paid  atomic.Int64
	tried map[string]bool
}

// Run pays the chosen orders every 300 ms until ctx ends, then once more.
func (p *Payer) Run(ctx context.Context) {
	if p.tried == nil {
		p.tried = map[string]bool{}
	}
	for {
		p.pass(context.WithoutCancel(ctx))
		select {
		case <-ctx.Done():
			p.pass(context.WithoutCancel(ctx))
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// pass pays the chosen CREATED orders not tried yet.
func (p *Payer) pass(ctx context.Context) {
	rows, err := p.Pool.Query(ctx, `SELECT order_id, user_id FROM orders WHERE activity_id = $1 AND status = 'CREATED'`, p.ActivityID)
	if err != nil {
		return
	}
	var todo []payable
	for rows.Next() {
		var o payable
		if rows.Scan(&o.orderID, &o.userID) == nil && !p.tried[o.orderID] && p.chosen(o.orderID) {
			todo = append(todo, o)
			p.tried[o.orderID] = true
		}
	}
	rows.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(todo) {
					return
				}
				p.pay(ctx, i, todo[i])
			}
		}()
	}
	wg.Wait()
}

func (p *Payer) chosen(orderID string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(orderID))
	f := float64(h.Sum32()%10_000) / 10_000
	return f >= p.From && f < p.To
}

// pay pays (or cancels) one order, trying up to five instances while they
// are unavailable; a definite refusal (the order expired meanwhile)
// leaves it to its timeout.
func (p *Payer) pay(ctx context.Context, i int, o payable) {
	for attempt := range 5 {
		c := seckillv1connect.NewOrderServiceClient(p.HTTP, p.Bases[(i+attempt)%len(p.Bases)])
		err := p.call(ctx, c, o)
		if err == nil {
			p.Paid.Add(1)
			return
		}
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded {
			return
		}
	}
}

// call makes the one PayOrder or CancelOrder call of o.
func (p *Payer) call(ctx context.Context, c seckillv1connect.OrderServiceClient, o payable) error {
	if !p.Cancel {
		req := connect.NewRequest(&seckillv1.PayOrderRequest{OrderId: o.orderID, PaymentId: "pay-" + o.orderID})
		req.Header().Set("Authorization", "Bearer "+p.Token)
		_, err := c.PayOrder(ctx, req)
		return err
	}
	tok, err := api.MintToken(p.Secret, o.userID, false, time.Hour, time.Now())
	if err != nil {
		return err
	}
	req := connect.NewRequest(&seckillv1.CancelOrderRequest{OrderId: o.orderID})
	req.Header().Set("Authorization", "Bearer "+tok)
	_, err = c.CancelOrder(ctx, req)
	return err
}

// payable is one CREATED order and its buyer.
type payable struct {
	orderID string
	userID  int64
}
