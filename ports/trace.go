package ports

import (
	"context"

	"github.com/seckill-dev/seckill/domain/message"
)

type traceKey struct{}

// WithTrace returns ctx carrying the W3C trace context of the current
// request or message; messages produced under ctx carry it on.
func WithTrace(ctx context.Context, tc message.TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, tc)
}

// TraceFrom returns the trace context stored by WithTrace (zero if none).
func TraceFrom(ctx context.Context) message.TraceContext {
	tc, _ := ctx.Value(traceKey{}).(message.TraceContext)
	return tc
}

type eventTracesKey struct{}

// WithEventTraces returns ctx carrying, per order id, the trace context of
// the operation that caused that order's events, for one OrderStore
// AppendEvents call that appends the events of several operations (a
// consumer batch) in one statement. An order present in traces records its
// entry, even a zero one (no trace); an order absent from it records
// TraceFrom(ctx). The map is not copied: the caller must not modify it
// while ctx is in use.
func WithEventTraces(ctx context.Context, traces map[string]message.TraceContext) context.Context {
	return context.WithValue(ctx, eventTracesKey{}, traces)
}

// EventTraceFrom returns the trace context WithEventTraces stored for
// orderID and true, or the zero value and false when ctx carries no entry
// for it (the caller then uses TraceFrom(ctx)).
func EventTraceFrom(ctx context.Context, orderID string) (message.TraceContext, bool) {
	traces, _ := ctx.Value(eventTracesKey{}).(map[string]message.TraceContext)
	tc, ok := traces[orderID]
	return tc, ok
}
