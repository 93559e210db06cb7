package bootstrap_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/bootstrap/config"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// traceIDOf returns the trace id of a version-00 traceparent ("" when it
// is not one).
func traceIDOf(tp string) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

// checkEventTraces places an order with a traceparent header, pays it with
// another, and checks that the events served by EventService.Subscribe
// carry the trace of the request that caused them: ORDER_CREATED (written
// by the order-create consumer, from the message's trace) the PlaceOrder
// trace, PAYMENT_STARTED and ORDER_PAID the PayOrder one; each event's
// traceparent is the one the API answered its request with. continued says
// whether the service continues the caller's trace (the answer has the
// header's trace id); it returns the two answered traceparents.
func checkEventTraces(t *testing.T, s *system, activity int64, continued bool) (placeAnswer, payAnswer string) {
	t.Helper()
	const (
		placeTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		payTrace   = "0af7651916cd43dd8448eb211c80319c"
	)
	s.activity(activity, 5, time.Hour, 5*time.Minute)
	es := s.subscribeEvents(0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	req := authed(&seckillv1.PlaceOrderRequest{ActivityId: activity, SkuId: 1, RequestId: "req-event-trace"}, s.token(1, false))
	req.Header().Set("traceparent", "00-"+placeTrace+"-00f067aa0ba902b7-01")
	placed, err := s.orders.PlaceOrder(ctx, req)
	if err != nil {
		t.Fatalf("PlaceOrder: %v", err)
	}
	orderID := placed.Msg.GetOrderId()
	placeAnswer = placed.Header().Get("traceparent")
	if traceIDOf(placeAnswer) == "" || continued != (traceIDOf(placeAnswer) == placeTrace) {
		t.Fatalf("PlaceOrder answered traceparent %q (header's trace %s, continued %v)", placeAnswer, placeTrace, continued)
	}
	s.eventually(30*time.Second, "the order is created", func() bool {
		o, err := s.getOrder(1, orderID)
		return err == nil && o.GetStatus() == seckillv1.OrderStatus_ORDER_STATUS_CREATED
	})

	payReq := authed(&seckillv1.PayOrderRequest{OrderId: orderID, PaymentId: "pay-event-trace"}, s.paymentToken())
	payReq.Header().Set("traceparent", "00-"+payTrace+"-b7ad6b7169203331-01")
	paid, err := s.orders.PayOrder(ctx, payReq)
	if err != nil {
		t.Fatalf("PayOrder: %v", err)
	}
	payAnswer = paid.Header().Get("traceparent")
	if traceIDOf(payAnswer) == "" || continued != (traceIDOf(payAnswer) == payTrace) || traceIDOf(payAnswer) == traceIDOf(placeAnswer) {
		t.Fatalf("PayOrder answered traceparent %q (header's trace %s, continued %v, PlaceOrder's %q)", payAnswer, payTrace, continued, placeAnswer)
	}

	want := map[string]string{"ORDER_CREATED": placeAnswer, "ORDER_PAYMENT_STARTED": payAnswer, "ORDER_PAID": payAnswer}
	got := map[string]string{}
	s.eventually(30*time.Second, "the order's three events are served", func() bool {
		evs, err := es.snapshot()
		if err != nil {
			t.Fatalf("subscription ended: %v", err)
		}
		for _, e := range evs {
			if e.GetOrderId() == orderID {
				got[e.GetEventType()] = e.GetTraceparent()
			}
		}
		return len(got) == len(want)
	})
	for typ, tp := range want {
		if got[typ] != tp {
			t.Errorf("%s traceparent %q, want %q (trace %s)", typ, got[typ], tp, traceIDOf(tp))
		}
	}
	return placeAnswer, payAnswer
}

// TestEventTraceWithoutExporter: with tracing off (no OTLP endpoint, the
// default) the service still continues the caller's trace, and every
// order event records the traceparent of the request that caused it.
func TestEventTraceWithoutExporter(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	checkEventTraces(t, s, 7301, true)
}

// TestEventTraceWithExporter: with tracing on, the recorded traceparent is
// the request's server span, the one the API answers with, whose trace
// reaches the exporter. The server span starts a new trace (linked to the
// caller's span): the OpenTelemetry Connect interceptor does not adopt an
// untrusted remote parent.
func TestEventTraceWithExporter(t *testing.T) {
	t.Parallel()
	sink := startOTLPSink(t)
	s := startSystem(t, options{configure: func(c *config.Config) {
		c.Tracing.Endpoint = sink.url
		c.Tracing.SampleRatio = 1
	}})
	placeAnswer, payAnswer := checkEventTraces(t, s, 7302, false)
	for _, tp := range []string{placeAnswer, payAnswer} {
		id, err := hex.DecodeString(traceIDOf(tp))
		if err != nil {
			t.Fatal(err)
		}
		s.eventually(30*time.Second, "the recorded trace "+tp+" is exported", func() bool {
			return find(sink.trace(id), "seckill.v1.OrderService/") != nil
		})
	}
}

// TestEventTraceConcurrentOrdersAndTimeouts: orders placed at once, each
// with its own trace (the order-create consumer may take them in one batch
// transaction, as the payment-timeout consumer may take their checks),
// each have an ORDER_CREATED with their PlaceOrder trace and, once the
// payment timeout cancels them, an ORDER_CANCELED with the same trace (the
// timeout message carries the trace of the request that placed the
// order).
func TestEventTraceConcurrentOrdersAndTimeouts(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	const (
		activity = 7303
		n        = 8
	)
	s.activity(activity, n, 2*time.Second, time.Minute)
	es := s.subscribeEvents(0)
	answers := make([]string, n)
	orderIDs := make([]string, n)
	errs := make([]error, n)
	concurrently(n, n, func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := authed(&seckillv1.PlaceOrderRequest{ActivityId: activity, SkuId: 1, RequestId: fmt.Sprintf("req-trace-%d", i)},
			s.token(int64(100+i), false))
		req.Header().Set("traceparent", fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", 0xabc000+i))
		res, err := s.orders.PlaceOrder(ctx, req)
		if err != nil {
			errs[i] = err
			return
		}
		orderIDs[i], answers[i] = res.Msg.GetOrderId(), res.Header().Get("traceparent")
	})
	want := map[string]string{} // "<order id> <event type>" -> traceparent
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("PlaceOrder %d: %v", i, errs[i])
		}
		if traceIDOf(answers[i]) != fmt.Sprintf("%032x", 0xabc000+i) {
			t.Fatalf("PlaceOrder %d answered traceparent %q", i, answers[i])
		}
		want[orderIDs[i]+" ORDER_CREATED"] = answers[i]
		want[orderIDs[i]+" ORDER_CANCELED"] = answers[i]
	}
	got := map[string]string{}
	s.eventually(60*time.Second, "every order is created and canceled by its payment timeout", func() bool {
		evs, err := es.snapshot()
		if err != nil {
			t.Fatalf("subscription ended: %v", err)
		}
		for _, e := range evs {
			got[e.GetOrderId()+" "+e.GetEventType()] = e.GetTraceparent()
		}
		for k := range want {
			if _, ok := got[k]; !ok {
				return false
			}
		}
		return true
	})
	for k, tp := range want {
		if got[k] != tp {
			t.Errorf("%s traceparent %q, want %q", k, got[k], tp)
		}
	}
}
