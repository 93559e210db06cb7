package salekit

import (
	"context"
	"math/rand/v2"
	"net/http"
	"time"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"

	"connectrpc.com/connect"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// BuyerAnswer is what one buyer was finally told.
type BuyerAnswer struct {
	OrderID  string // set when acknowledged (QUEUING or later)
	definite bool   // a definite answer arrived (acknowledged or refused)
}

// AcknowledgedIDs are the order ids buyers were told.
func AcknowledgedIDs(answers []BuyerAnswer) []string {
	var ids []string
	for _, a := range answers {
		if a.OrderID != "" {
			ids = append(ids, a.OrderID)
		}
	}
	return ids
}

// BuyUntilDefinite places one buyer's order, spreading its attempts over
// the service instances at bases (the buyer's id picks the first, each
// retry the next: a client-side spread) and retrying the same request_id
// until a definite answer (acknowledged, sold out, already purchased) or
// ctx ends. answered, when not nil, is told the index of every instance
// that answered a call itself (a connection refused or timed out is not
// an answer) and whether it acknowledged.
func BuyUntilDefinite(ctx context.Context, httpc *http.Client, bases []string, secret []byte, activityID, user int64, requestID string,
	answered func(instance int, acknowledged bool)) BuyerAnswer {
	tok, err := api.MintToken(secret, user, false, time.Hour, time.Now())
	if err != nil {
		return BuyerAnswer{}
	}
	if answered == nil {
		answered = func(int, bool) {}
	}
	backoff := 50 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		i := (int(user) + attempt) % len(bases)
		c := seckillv1connect.NewOrderServiceClient(httpc, bases[i])
		req := connect.NewRequest(&seckillv1.PlaceOrderRequest{ActivityId: activityID, SkuId: 1, RequestId: requestID})
		req.Header().Set("Authorization", "Bearer "+tok)
		out, err := c.PlaceOrder(ctx, req)
		if err == nil {
			answered(i, true)
			return BuyerAnswer{OrderID: out.Msg.GetOrderId(), definite: true}
		}
		switch connect.CodeOf(err) {
		case connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeInvalidArgument, connect.CodePermissionDenied:
			answered(i, false)
			return BuyerAnswer{definite: true}
		case connect.CodeResourceExhausted, connect.CodeAborted:
			answered(i, false) // answered, but not definitely
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
	}
	return BuyerAnswer{}
}
