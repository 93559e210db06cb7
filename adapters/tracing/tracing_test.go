package tracing_test

import (
	"context"
	"testing"

	"github.com/seckill-dev/seckill/adapters/tracing"
)

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
