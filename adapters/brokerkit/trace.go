package brokerkit

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
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
