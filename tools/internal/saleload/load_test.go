package saleload

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/adapters/api"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// tinySale sells stock units, one per request id (a retried request id
// gets its order id again), and answers sold out once they are gone.
type tinySale struct {
	seckillv1connect.UnimplementedOrderServiceHandler
	mu     sync.Mutex
	stock  int
	orders map[string]string
}

func (s *tinySale) PlaceOrder(_ context.Context, req *connect.Request[seckillv1.PlaceOrderRequest]) (*connect.Response[seckillv1.PlaceOrderResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rid := req.Msg.GetRequestId()
	id, ok := s.orders[rid]
	if !ok && s.stock > 0 {
		s.stock--
		id = "ord-" + rid
		s.orders[rid] = id
	}
	if id != "" {
		return connect.NewResponse(&seckillv1.PlaceOrderResponse{OrderId: id, Status: seckillv1.OrderStatus_ORDER_STATUS_QUEUING}), nil
	}
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("sold out"))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: api.ReasonSoldOut, Domain: api.ErrorDomain}); err == nil {
		ce.AddDetail(d)
	}
	return nil, ce
}

// TestLoadRecordsEveryAnswer: every buyer makes its attempts, each answer
// is counted under its outcome, the accepted order ids are the distinct
// ones, and a service that keeps a retried request id's answer shows no
// idempotency break; over both protocols.
func TestLoadRecordsEveryAnswer(t *testing.T) {
	for _, o := range []Options{{Protocol: "connect"}, {Protocol: "connect", H2C: true}, {Protocol: "grpc"}} {
		t.Run(o.ProtocolText(), func(t *testing.T) {
			sale := &tinySale{stock: 5, orders: map[string]string{}}
			mux := http.NewServeMux()
			mux.Handle(seckillv1connect.NewOrderServiceHandler(sale))
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetHTTP1(true)
			srv.Config.Protocols.SetUnencryptedHTTP2(true)
			srv.Start()
			defer srv.Close()
			o.Buyers, o.Attempts, o.Clients, o.SameRequestShare, o.Stock = 20, 3, 4, 1, 5
			load, err := New(o, srv.URL, []byte("load-test-secret"), 7)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			load.Run(ctx, time.Now())
			c := load.Counts()
			ids, last := load.AcceptedIDs()
			two, changed := load.IdempotencyBreaks()
			if c.Total() != 60 || c.SoldOut+c.Accepted != 60 || len(ids) != 5 || last.IsZero() || two != 0 || changed != 0 {
				t.Fatalf("counts %+v, others %v, %d accepted ids (last %v), breaks %d/%d; want 60 answers, 5 distinct orders, no break",
					c, load.OtherByCode(), len(ids), last, two, changed)
			}
			if n := len(load.Latencies()); n != 60 || load.AnsweredAfter(time.Time{}) != 60 || load.LastAnswerAt().IsZero() {
				t.Fatalf("%d latencies, %d answers after the zero time", n, load.AnsweredAfter(time.Time{}))
			}
		})
	}
}
