package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// TestTraceCrossesTheBroker: with a tracer, a publish records "send
// <topic>" under the caller's span, the consumer records "process
// <topic>" as the send's child (through the traceparent property) and the
// handler's own spans hang under it, as with the RocketMQ adapter.
func TestTraceCrossesTheBroker(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := rabbittest.NewEnv(t, nil)
	cfg := env.Config
	cfg.Tracer = tp
	sub := ports.Subscription{Group: "CG_CREATE", Topic: ports.TopicOrderCreate, MaxRetries: 3}
	env.AddGroup(sub)
	handled := make(chan struct{}, 1)
	r, err := rabbitmq.NewRunner(cfg, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: 1, BatchSize: 1},
		handlerFunc(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
			_, span := tp.Tracer("test").Start(ctx, "postgres transaction")
			span.End()
			handled <- struct{}{}
			return []ports.Decision{ports.Acked("created")}
		}), testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, r)
	p := startPublisher(t, cfg)
	ctx, api := tp.Tracer("test").Start(context.Background(), "api")
	if _, err := p.Publish(ctx, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: "ord_traced", Body: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	api.End()
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the message was not handled")
	}
	var send, process, tx sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	// The process span ends after the handler's (it wraps the handler and
	// the acknowledgement): wait for all three.
	for (send == nil || process == nil || tx == nil) && time.Now().Before(deadline) {
		for _, s := range rec.Ended() {
			switch {
			case strings.HasPrefix(s.Name(), "send "):
				send = s
			case strings.HasPrefix(s.Name(), "process "):
				process = s
			case s.Name() == "postgres transaction":
				tx = s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if send == nil || process == nil || tx == nil {
		t.Fatalf("spans: send %v process %v transaction %v", send != nil, process != nil, tx != nil)
	}
	switch {
	case send.Parent().SpanID() != api.SpanContext().SpanID():
		t.Errorf("send is not the API span's child")
	case process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanKind() != trace.SpanKindConsumer:
		t.Errorf("process is not the send's child across the broker")
	case tx.Parent().SpanID() != process.SpanContext().SpanID():
		t.Errorf("the handler's span is not the process span's child")
	case !strings.Contains(send.Name(), "ORDER_CREATE") || !strings.Contains(process.Name(), "ORDER_CREATE"):
		t.Errorf("span names %q, %q: not the order-create topic", send.Name(), process.Name())
	}
}
