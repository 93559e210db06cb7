package benchanswers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// TestFloorAnswerIsTheSoldOutAnswer checks that the floor server's answer
// is what the sale's load generator counts as SOLD_OUT, over Connect JSON
// as the bench sends it: the floor answers the same thing the service
// does, so the two are compared call for call.
func TestFloorAnswerIsTheSoldOutAnswer(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(seckillv1connect.NewOrderServiceHandler(&floorHandler{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	load, err := saleload.New(saleload.Options{Stock: 1, Buyers: 1, Attempts: 1, Clients: 1, Protocol: "connect"},
		srv.URL, []byte("floor-test-secret"), 1)
	if err != nil {
		t.Fatal(err)
	}
	load.Run(ctx, time.Now())
	if c := load.Counts(); c.SoldOut != 1 || c.Total() != 1 {
		t.Fatalf("the floor's answer is counted %+v (others: %v), want one %s", c, load.OtherByCode(), saleload.SoldOut)
	}
	client := seckillv1connect.NewOrderServiceClient(srv.Client(), srv.URL, connect.WithCodec(benchenv.SaleJSONCodec{}))
	_, err = client.PlaceOrder(ctx, connect.NewRequest(&seckillv1.PlaceOrderRequest{ActivityId: 1, SkuId: 1, RequestId: "sale-1-0"}))
	if got := connect.CodeOf(err); got != connect.CodeFailedPrecondition {
		t.Fatalf("code %s, want %s", got, connect.CodeFailedPrecondition)
	}
}

// TestAnswersOptionsRefuseNonPositive checks the flags' validation.
func TestAnswersOptionsRefuseNonPositive(t *testing.T) {
	for _, args := range [][]string{{"--calls", "0"}, {"--warmup", "0"}, {"--clients", "-1"}, {"--runs", "0"}, {"--protocol", "h3"}} {
		if _, err := parseAnswersOptions(args); err == nil {
			t.Errorf("parseAnswersOptions(%v) accepted", args)
		}
	}
	o, err := parseAnswersOptions(nil)
	if err != nil || o.calls != 40000 || o.runs != 3 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
}
