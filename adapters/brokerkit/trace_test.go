package brokerkit_test

import (
	"context"
	"testing"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// TestTraceparentRoundTrip: a valid traceparent survives the context; an
// invalid one gives none; TraceIDOf reads the trace id of a valid one.
func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := brokerkit.TraceparentOf(brokerkit.WithTraceparent(context.Background(), tp)); got != tp {
		t.Fatalf("round trip of %q gave %q", tp, got)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if got := brokerkit.TraceparentOf(brokerkit.WithTraceparent(context.Background(), bad)); got != "" {
			t.Errorf("%q gave a span context %q", bad, got)
		}
	}
	if got := brokerkit.TraceIDOf(tp); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("TraceIDOf = %q", got)
	}
	if got := brokerkit.TraceIDOf("garbage"); got != "" {
		t.Fatalf("TraceIDOf(garbage) = %q", got)
	}
}
