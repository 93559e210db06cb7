package rocketmq

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// withTraceparent returns ctx with the remote span context of a W3C
// traceparent value as parent (ctx unchanged when it is not one).
func withTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// traceparentOf returns the W3C traceparent of the span in ctx ("" when
// ctx holds no valid span context).
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
