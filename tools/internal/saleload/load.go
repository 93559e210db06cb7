package saleload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/salekit"
)

// The outcomes a PlaceOrder answer is counted under: a reservation with
// an order id, the sale sold out, the buyer holding a unit already, and
// anything else (counted by its Connect code and ErrorInfo reason, see
// Load.OtherByCode).
const (
	Accepted         = "accepted"
	SoldOut          = "sold_out"
	AlreadyPurchased = "already_purchased"
	Other            = "other"
)

// Options are the settings of a Load.
type Options struct {
	// Buyers is the number of buyers; buyer i is user 1,000,000 +
	// UserOffset + i, with a token of its own.
	Buyers int
	// Attempts is the number of PlaceOrder calls of each buyer, each
	// made right after the answer to the previous one.
	Attempts int
	// SameRequestShare is the share (0 to 1) of a buyer's later attempts
	// that reuse its first request_id (a retried click); the others use a
	// new request_id (a new click).
	SameRequestShare float64
	// StopOnAnswer stops a buyer after its first definite answer
	// (accepted, sold out, already purchased) instead of making every
	// attempt.
	StopOnAnswer bool
	// Ramp spreads the buyers' starts evenly over this long from the
	// start of Run; 0: every buyer at the start.
	Ramp time.Duration
	// Clients is the number of concurrent clients; a client serves one
	// buyer at a time.
	Clients int
	// Protocol is connect (Connect JSON, one HTTP/1.1 connection per
	// client, or h2c with H2C) or grpc (gRPC over h2c).
	Protocol string
	// H2C, with Protocol connect, speaks HTTP/2 without TLS instead of
	// HTTP/1.1.
	H2C bool
	// Seed seeds the buyers' choices (which later attempts reuse the
	// request_id).
	Seed uint64
	// UserOffset moves every buyer's user id up by this many, so that
	// the loads of one run do not share buyers.
	UserOffset int
	// Stock is the number of units on sale: it sizes the record of the
	// accepted order ids (0: it grows as they come).
	Stock int
}

// ProtocolText names the protocol and transport o speaks, as the
// benches print it.
func (o Options) ProtocolText() string {
	switch {
	case o.Protocol == "grpc":
		return "gRPC over h2c"
	case o.H2C:
		return "Connect JSON over h2c"
	}
	return "Connect JSON over HTTP/1.1"
}

// Counts are a Load's answers by outcome.
type Counts struct {
	Accepted, SoldOut, AlreadyPurchased, Other int64
}

// Total is the number of answers of every outcome.
func (c Counts) Total() int64 { return c.Accepted + c.SoldOut + c.AlreadyPurchased + c.Other }

// Load drives the buyers of one activity's SKU 1 and records every
// answer. Its methods are safe to call while Run runs (a sampler reads
// them), and what they return is theirs to keep.
type Load struct {
	opts      Options
	client    seckillv1connect.OrderServiceClient
	transport *http.Transport
	// auth is each buyer's Authorization header value ("Bearer " and
	// the buyer's token).
	auth       []string
	activityID int64
	start      time.Time

	counts [4]atomic.Int64 // accepted, sold out, already purchased, other

	mu          sync.Mutex
	otherByCode map[string]int
	interval    salekit.Latencies // PlaceOrder latencies since the last sample
	all         salekit.Latencies
	answeredAt  []time.Time // when each answer arrived
	// firstSeen is when each accepted order id was first received: the
	// client's time of that reservation.
	firstSeen map[string]time.Time
	lastAny   time.Time
	// twoOrders counts buyers told two different order ids; changedRetry
	// counts attempts that reused an accepted request_id and were not
	// answered with the same order id.
	twoOrders, changedRetry int
}

// firstUser is the user id of buyer 0; buyer i is firstUser+i.
const firstUser = 1_000_000

// New returns the load o describes against the service whose public API
// is at base, buying SKU 1 of activity activityID. Every buyer's token is
// minted here with secret (valid for two hours), before any clock
// starts: signing is the client's cost, not the service's.
func New(o Options, base string, secret []byte, activityID int64) (*Load, error) {
	tr := &http.Transport{MaxIdleConns: o.Clients, MaxIdleConnsPerHost: o.Clients, IdleConnTimeout: time.Minute}
	var opts []connect.ClientOption
	if o.Protocol == "grpc" || o.H2C {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = p
	}
	if o.Protocol == "grpc" {
		opts = append(opts, connect.WithGRPC())
	} else {
		opts = append(opts, connect.WithCodec(benchenv.SaleJSONCodec{}))
	}
	l := &Load{opts: o, transport: tr, activityID: activityID, otherByCode: map[string]int{},
		firstSeen: make(map[string]time.Time, o.Stock), all: make(salekit.Latencies, 0, o.Buyers*o.Attempts),
		answeredAt: make([]time.Time, 0, o.Buyers*o.Attempts),
		client:     seckillv1connect.NewOrderServiceClient(&http.Client{Transport: benchenv.WholeBodyTransport{Next: tr}}, base, opts...)}
	l.auth = make([]string, o.Buyers)
	now := time.Now()
	for i := range l.auth {
		tok, err := api.MintToken(secret, int64(firstUser+o.UserOffset+i), false, 2*time.Hour, now)
		if err != nil {
			return nil, fmt.Errorf("mint buyer tokens: %w", err)
		}
		l.auth[i] = "Bearer " + tok
	}
	return l, nil
}

// Run lets o.Clients clients serve the buyers in order, the load's clock
// (and its ramp) starting at start, and returns when every buyer is done
// or ctx ended. A buyer's attempts follow one another on the same client,
// each right after the previous answer. Run is called once.
func (l *Load) Run(ctx context.Context, start time.Time) {
	l.start = start
	defer l.transport.CloseIdleConnections()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range l.opts.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= l.opts.Buyers {
					return
				}
				if l.opts.Ramp > 0 {
					at := l.start.Add(time.Duration(float64(l.opts.Ramp) * float64(i) / float64(l.opts.Buyers)))
					if d := time.Until(at); d > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(d):
						}
					}
				}
				l.buy(ctx, i)
			}
		}()
	}
	wg.Wait()
}

// buy makes buyer i's attempts. The first uses request_id sale-<i>-0; a
// later attempt reuses it with probability SameRequestShare and uses a
// new one otherwise.
func (l *Load) buy(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(l.opts.Seed, uint64(i)))
	prefix := "sale-" + strconv.Itoa(i) + "-"
	first := prefix + "0"
	var orderID string // the order id this buyer was told, if any
	for k := 0; k < l.opts.Attempts && ctx.Err() == nil; k++ {
		rid, same := first, true
		if k > 0 && rng.Float64() >= l.opts.SameRequestShare {
			rid, same = prefix+strconv.Itoa(k), false
		}
		outcome, got := l.place(ctx, l.auth[i], rid)
		if outcome == Accepted {
			switch {
			case orderID == "":
				orderID = got
			case got != orderID:
				l.mu.Lock()
				l.twoOrders++
				l.mu.Unlock()
			}
		} else if k > 0 && same && orderID != "" && outcome != Other {
			// A definite refusal of a request_id that was accepted
			// before: the retry was not idempotent.
			l.mu.Lock()
			l.changedRetry++
			l.mu.Unlock()
		}
		if l.opts.StopOnAnswer && outcome != Other {
			return
		}
	}
}

// place makes one PlaceOrder call with the Authorization header value
// auth and records its answer.
func (l *Load) place(ctx context.Context, auth, requestID string) (outcome, orderID string) {
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := connect.NewRequest(&seckillv1.PlaceOrderRequest{ActivityId: l.activityID, SkuId: 1, RequestId: requestID})
	req.Header().Set("Authorization", auth)
	t0 := time.Now()
	res, err := l.client.PlaceOrder(callCtx, req)
	at := time.Now()
	outcome, key, orderID := classifyPlace(res, err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.interval = append(l.interval, at.Sub(t0))
	l.all = append(l.all, at.Sub(t0))
	l.answeredAt = append(l.answeredAt, at)
	l.lastAny = at
	switch outcome {
	case Accepted:
		l.counts[0].Add(1)
		if _, ok := l.firstSeen[orderID]; !ok {
			l.firstSeen[orderID] = at
		}
	case SoldOut:
		l.counts[1].Add(1)
	case AlreadyPurchased:
		l.counts[2].Add(1)
	default:
		l.counts[3].Add(1)
		l.otherByCode[key]++
	}
	return outcome, orderID
}

// classifyPlace names a PlaceOrder answer: accepted (a reservation with
// an order id, QUEUING or later), sold_out, already_purchased, or other
// with key = the Connect code and ErrorInfo reason (or the order status
// of an answer that is not a live reservation).
func classifyPlace(res *connect.Response[seckillv1.PlaceOrderResponse], err error) (outcome, key, orderID string) {
	if err == nil {
		switch st := res.Msg.GetStatus(); st {
		case seckillv1.OrderStatus_ORDER_STATUS_QUEUING, seckillv1.OrderStatus_ORDER_STATUS_CREATED,
			seckillv1.OrderStatus_ORDER_STATUS_PAID:
			if res.Msg.GetOrderId() != "" {
				return Accepted, Accepted, res.Msg.GetOrderId()
			}
			return Other, "ok/no_order_id", ""
		default:
			return Other, "ok/" + strings.ToLower(strings.TrimPrefix(st.String(), "ORDER_STATUS_")), ""
		}
	}
	code := connect.CodeOf(err)
	reason := api.ErrorReason(err)
	switch reason {
	case api.ReasonSoldOut:
		return SoldOut, SoldOut, ""
	case api.ReasonAlreadyPurchased:
		return AlreadyPurchased, AlreadyPurchased, ""
	}
	key = code.String()
	if reason != "" {
		key += "/" + reason
	}
	return Other, key, ""
}
