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
