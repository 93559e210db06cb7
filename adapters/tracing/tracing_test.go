package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/adapters/tracing"
)

func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := tracing.FromTraceparent(context.Background(), tp)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("span context %v", sc)
	}
	if got := tracing.Traceparent(ctx); got != tp {
		t.Fatalf("Traceparent = %q, want %q", got, tp)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := trace.SpanContextFromContext(tracing.FromTraceparent(context.Background(), bad)); sc.IsValid() {
			t.Errorf("%q gave a valid span context", bad)
		}
	}
}

func TestNoEndpointIsNoop(t *testing.T) {
	p, err := tracing.New(context.Background(), tracing.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() {
		t.Fatal("tracing without an endpoint records spans")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
