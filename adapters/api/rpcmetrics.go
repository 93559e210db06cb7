package api

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// RPCMetrics counts and times every unary call of the API, one series per
// procedure (and Connect code): rpc_server_handled_total{procedure,code}
// and rpc_server_handling_seconds{procedure}; a server stream
// (EventService.Subscribe) is counted in rpc_server_handled_total when it
// ends, and not timed. A call refused before it
// reaches the services (no or bad token, body too large) is not counted
// here: it never becomes an RPC.
type RPCMetrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewRPCMetrics registers the per-RPC collectors with reg.
func NewRPCMetrics(reg prometheus.Registerer) (*RPCMetrics, error) {
	m := &RPCMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rpc_server_handled_total",
			Help: "API calls completed, by procedure and Connect code (ok for success)."}, []string{"procedure", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rpc_server_handling_seconds",
			Help:    "Time from the call entering the interceptors to its answer, by procedure.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"procedure"}),
	}
	for _, c := range []prometheus.Collector{m.handled, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// interceptor records each call; nil m records nothing.
func (m *RPCMetrics) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		if m == nil {
			return next
		}
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			proc := req.Spec().Procedure
			m.duration.WithLabelValues(proc).Observe(time.Since(start).Seconds())
			m.handled.WithLabelValues(proc, codeOf(err)).Inc()
			return res, err
		}
	}
}

// codeOf names the Connect code of err ("ok" for nil).
func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code().String()
	}
	return connect.CodeUnknown.String()
}
