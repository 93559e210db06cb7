package api

import (
	"strings"
	"testing"
)

func TestContinueTrace(t *testing.T) {
	in := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tc := continueTrace(in)
	if tc.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || tc.SpanID == "00f067aa0ba902b7" || len(tc.SpanID) != 16 {
		t.Fatalf("continued trace %+v", tc)
	}
	if !strings.HasPrefix(tc.Traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(tc.Traceparent, "-01") {
		t.Fatalf("traceparent %q", tc.Traceparent)
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"} {
		tc := continueTrace(bad)
		if len(tc.TraceID) != 32 || tc.TraceID == "4bf92f3577b34da6a3ce929d0e0e4736" || !isHex(tc.TraceID, 32) {
			t.Fatalf("%q: new trace expected, got %+v", bad, tc)
		}
	}
}
