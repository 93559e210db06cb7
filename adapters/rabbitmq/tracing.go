package rabbitmq

import (
	"context"
	"maps"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// tracerName is the instrumentation scope of the adapter's spans.
const tracerName = "github.com/seckill-dev/seckill/adapters/rabbitmq"

// startSend starts the producer span "send <topic>" of a publish (nil
// when tracing is off), as the RocketMQ adapter does: a child of the
// caller's span, or of the message's own traceparent when the caller has
// none (the relay and the scanner send stored messages). The message then
// carries the producer span as its traceparent property, so the
// consumer's span hangs under this send.
func (p *Publisher) startSend(ctx context.Context, topic string, msg *ports.OutboundMessage) (context.Context, trace.Span) {
	if p.tracer == nil {
		return ctx, nil
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = brokerkit.WithTraceparent(ctx, msg.Properties[message.PropTraceparent])
	}
	ctx, span := p.tracer.Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.destination.name", topic), attribute.String("messaging.message.id", msg.MessageID)))
	if span.IsRecording() {
		props := make(map[string]string, len(msg.Properties)+1)
		maps.Copy(props, msg.Properties)
		props[message.PropTraceparent] = brokerkit.TraceparentOf(ctx)
		msg.Properties = props
	}
	return ctx, span
}

// endSend records the outcome on the producer span and ends it.
func endSend(span trace.Span, outcome string, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("seckill.send_outcome", outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// startProcess starts the consumer span "process <topic>" of a batch (nil
// when tracing is off): a child of the first message's traceparent (its
// producer span), linked to the other messages' producer spans, so a
// one-message batch continues its order's trace and the handler's spans
// (the database transaction) hang under it.
func (r *Runner) startProcess(ctx context.Context, deliveries []ports.Delivery) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, nil
	}
	var links []trace.Link
	for _, d := range deliveries[1:] {
		if sc := trace.SpanContextFromContext(brokerkit.WithTraceparent(context.Background(), d.Properties[message.PropTraceparent])); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	parent := brokerkit.WithTraceparent(ctx, deliveries[0].Properties[message.PropTraceparent])
	return r.tracer.Start(parent, "process "+deliveries[0].Topic, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.consumer.group.name", r.name),
			attribute.String("messaging.destination.name", deliveries[0].Topic),
			attribute.Int("messaging.batch.message_count", len(deliveries))))
}
