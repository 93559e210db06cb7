package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// traceInterceptor continues the caller's W3C trace (`traceparent`
// header) or starts a new one, stores it in the context for the
// application (it travels inside every message produced for the request)
// and answers with the request's own traceparent. When tracing is on, the
// request's span (started by the OpenTelemetry interceptor before this
// one) is that context, so the spans of the messages hang under it.
func traceInterceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			var tc message.TraceContext
			if span := trace.SpanFromContext(ctx); span.IsRecording() {
				sc := span.SpanContext()
				tc = message.TraceContext{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(),
					Traceparent: traceparentOf(ctx)}
			} else {
				tc = continueTrace(req.Header().Get("traceparent"))
			}
			res, err := next(ports.WithTrace(ctx, tc), req)
			if res != nil {
				res.Header().Set("traceparent", tc.Traceparent)
			}
			return res, err
		}
	}
}

// continueTrace parses a traceparent (version 00) and returns a child
// context with a new span id; an absent or invalid header starts a new
// trace.
func continueTrace(header string) message.TraceContext {
	traceID, flags := "", "01"
	parts := strings.Split(strings.TrimSpace(header), "-")
	if len(parts) == 4 && parts[0] == "00" && isHex(parts[1], 32) && isHex(parts[2], 16) && isHex(parts[3], 2) &&
		parts[1] != strings.Repeat("0", 32) && parts[2] != strings.Repeat("0", 16) {
		traceID, flags = parts[1], parts[3]
	}
	if traceID == "" {
		traceID = randomHex(16)
	}
	span := randomHex(8)
	return message.TraceContext{TraceID: traceID, SpanID: span, Traceparent: "00-" + traceID + "-" + span + "-" + flags}
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand does not fail on supported platforms
	return hex.EncodeToString(b)
}

// traceparentOf returns the W3C traceparent of the span in ctx ("" when
// ctx holds no valid span context).
func traceparentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
