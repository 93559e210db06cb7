package brokerkit

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// WithTraceparent returns ctx with the remote span context of a W3C
// traceparent value as parent (ctx unchanged when it is not one).
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// TraceparentOf returns the W3C traceparent of the span in ctx ("" when
// ctx holds no valid span context).
func TraceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// TraceIDOf returns the trace id of a W3C traceparent value ("" when it
// is not one): the log field trace_id of a delivery.
func TraceIDOf(traceparent string) string {
	if len(traceparent) < 35 || traceparent[2] != '-' {
		return ""
	}
	return traceparent[3:35]
}

// StartSend starts the producer span "send <topic>" of a publish with
// tracer (ctx and a nil span when tracer is nil: tracing is off). system
// is the messaging system's name ("rocketmq", "kafka", ...). The span is
// a child of the caller's span, or of the message's own traceparent when
// the caller has none (the relay and the scanner send stored messages);
// the message then carries the producer span as its traceparent
// property (a copy of its properties), so the consumer's span hangs under
// this send.
func StartSend(ctx context.Context, tracer trace.Tracer, system, topic string, msg *ports.OutboundMessage) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = WithTraceparent(ctx, msg.Properties[message.PropTraceparent])
	}
	ctx, span := tracer.Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", system),
			attribute.String("messaging.destination.name", topic), attribute.String("messaging.message.id", msg.MessageID)))
	if span.IsRecording() {
		props := make(map[string]string, len(msg.Properties)+1)
		maps.Copy(props, msg.Properties)
		props[message.PropTraceparent] = TraceparentOf(ctx)
		msg.Properties = props
	}
	return ctx, span
}

// EndSend records a send's outcome on its producer span and ends it
// (nothing for a nil span).
func EndSend(span trace.Span, outcome string, err error) {
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

// StartProcess starts the consumer span "process <topic>" of a batch of
// consumer group group with tracer (ctx and a nil span when tracer is
// nil): a child of the first message's traceparent (its producer span),
// linked to the other messages' producer spans, so a one-message batch
// continues its order's trace and the handler's spans (the database
// transaction) hang under it.
func StartProcess(ctx context.Context, tracer trace.Tracer, system, group string, deliveries []ports.Delivery) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	var links []trace.Link
	for _, d := range deliveries[1:] {
		if sc := trace.SpanContextFromContext(WithTraceparent(context.Background(), d.Properties[message.PropTraceparent])); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	parent := WithTraceparent(ctx, deliveries[0].Properties[message.PropTraceparent])
	return tracer.Start(parent, "process "+deliveries[0].Topic, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("messaging.system", system),
			attribute.String("messaging.consumer.group.name", group),
			attribute.String("messaging.destination.name", deliveries[0].Topic),
			attribute.Int("messaging.batch.message_count", len(deliveries))))
}
