package bootstrap_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/seckill-dev/seckill/bootstrap/config"
)

// otlpSink is an OTLP/HTTP traces receiver that keeps every span.
type otlpSink struct {
	url   string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func startOTLPSink(t *testing.T) *otlpSink {
	t.Helper()
	s := &otlpSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		raw, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				s.spans = append(s.spans, ss.GetSpans()...)
			}
		}
		s.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// trace returns the spans of traceID.
func (s *otlpSink) trace(traceID []byte) []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*tracepb.Span
	for _, sp := range s.spans {
		if string(sp.GetTraceId()) == string(traceID) {
			out = append(out, sp)
		}
	}
	return out
}

// find returns the first span whose name has prefix.
func find(spans []*tracepb.Span, prefix string) *tracepb.Span {
	for _, sp := range spans {
		if strings.HasPrefix(sp.GetName(), prefix) {
			return sp
		}
	}
	return nil
}

// TestOnePlaceOrderIsOneTrace: with tracing on, one PlaceOrder yields one
// trace in which the API's server span is an ancestor of the send of the
// order-create message, whose consumer span (across the broker, through
// the message's traceparent) holds the PostgreSQL transaction that created
// the order.
func TestOnePlaceOrderIsOneTrace(t *testing.T) {
	t.Parallel()
	sink := startOTLPSink(t)
	s := startSystem(t, options{configure: func(c *config.Config) {
		c.Tracing.Endpoint = sink.url
		c.Tracing.SampleRatio = 1
	}})
	const activity = 7201
	s.activity(activity, 5, time.Hour, 5*time.Minute)
	res, err := s.place(context.Background(), 1, activity, "req-trace")
	if err != nil {
		t.Fatal(err)
	}
	s.eventually(30*time.Second, "the order is created", func() bool {
		return s.count(`SELECT count(*) FROM orders WHERE order_id = $1`, res.GetOrderId()) == 1
	})

	var api, send, process, commit *tracepb.Span
	var spans []*tracepb.Span
	s.eventually(30*time.Second, "the trace reaches the order's transaction", func() bool {
		sink.mu.Lock()
		all := slices.Clone(sink.spans)
		sink.mu.Unlock()
		api = find(all, "seckill.v1.OrderService/PlaceOrder")
		if api == nil {
			return false
		}
		spans = sink.trace(api.GetTraceId())
		send, process = find(spans, "send "), find(spans, "process ")
		commit = nil
		for _, sp := range spans {
			if sp.GetName() == "postgres transaction" && process != nil && string(sp.GetParentSpanId()) == string(process.GetSpanId()) {
				commit = sp
			}
		}
		return send != nil && process != nil && commit != nil
	})
	t.Logf("one PlaceOrder, trace %s:\n%s", hex.EncodeToString(api.GetTraceId()), tree(spans))

	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byID[string(sp.GetSpanId())] = sp
	}
	ancestor := func(of, want *tracepb.Span) bool {
		for sp := of; sp != nil; sp = byID[string(sp.GetParentSpanId())] {
			if sp == want {
				return true
			}
		}
		return false
	}
	switch {
	case !ancestor(send, api):
		t.Errorf("the send %q does not descend from the API span", send.GetName())
	case string(process.GetParentSpanId()) != string(send.GetSpanId()):
		t.Errorf("the consumer span %q is not the child of the send (across the broker)", process.GetName())
	case !strings.Contains(send.GetName(), "ORDER_CREATE") || !strings.Contains(process.GetName(), "ORDER_CREATE"):
		t.Errorf("send %q / process %q: not the order-create topic", send.GetName(), process.GetName())
	}
	if find(spans, "redis reserve") == nil {
		t.Errorf("no span of the reserve script in the trace")
	}
}

// tree renders spans as an indented tree by parent, with durations.
func tree(spans []*tracepb.Span) string {
	children := map[string][]*tracepb.Span{}
	ids := map[string]bool{}
	for _, sp := range spans {
		ids[string(sp.GetSpanId())] = true
	}
	var roots []*tracepb.Span
	for _, sp := range spans {
		p := string(sp.GetParentSpanId())
		if p == "" || !ids[p] {
			roots = append(roots, sp)
			continue
		}
		children[p] = append(children[p], sp)
	}
	var b strings.Builder
	var walk func(sp *tracepb.Span, depth int)
	walk = func(sp *tracepb.Span, depth int) {
		d := time.Duration(sp.GetEndTimeUnixNano() - sp.GetStartTimeUnixNano())
		fmt.Fprintf(&b, "%s%s (%s)\n", strings.Repeat("  ", depth), sp.GetName(), d.Round(10*time.Microsecond))
		kids := children[string(sp.GetSpanId())]
		slices.SortFunc(kids, func(a, c *tracepb.Span) int { return int(a.GetStartTimeUnixNano() - c.GetStartTimeUnixNano()) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
