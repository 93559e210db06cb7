// Package api is the driving adapter: it serves seckill.v1.OrderService,
// seckill.v1.AdminService and seckill.v1.EventService (a server stream of
// the order events) with Connect, gRPC and gRPC-Web on one h2c
// port, together with gRPC health and gRPC reflection (the schema is
// public; the calls it lists need tokens); extra handlers (for example
// /metrics) go on a separate operations handler with a guard of its own
// (NewOpsHandler). It bounds what a connection and a request may cost
// before authenticating it (connections open in total and per client
// address, body, message, header and token sizes, read, header and idle
// timeouts on HTTP/1 and HTTP/2, HTTP/2 streams, a per-address rate),
// authenticates every
// call from its headers (JWT HS256 bearer tokens) before reading its body,
// checks the procedure's scope, applies the concurrency and per-user
// limits, validates requests (InvalidArgument naming the field) and maps
// application errors to Connect codes in one function, toConnectError,
// never leaking internals to clients.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Route is an extra HTTP handler mounted beside the services.
type Route struct {
	Pattern string
	Handler http.Handler
}

// NewHandler returns the API handler: the services, gRPC health
// (grpc.health.v1) answered by health (nil: SERVING for both services
// always) and gRPC reflection (v1 and v1alpha, with the descriptors of the
// error details). Each service request passes, in order, the per-address
// rate limit, the wire body cap, authentication from the headers alone
// (no body byte is read for an unauthenticated caller, and an HTTP/1
// connection refused there is closed after the answer), then the
// decompressed message cap, the per-RPC metrics and span (obs), the trace
// context, the scope check of the procedure and the concurrency and
// per-user limits. Health and reflection answer without a token; they are
// bounded by the connection and stream limits of the server.
//
// EventService streams are served by events (nil: every call is answered
// Unimplemented, after authentication). The unary interceptors do not see
// a stream: streamGuard applies the identity and scope check (and the
// per-RPC count) to it, the handler its own cap of open streams and its
// send bound (Limits.EventStreams, EventSendTimeout), and it lifts the
// server's read timeout once the request is read, so that timeout bounds
// a slow request, never a long-lived stream.
//
// The calls of running a sale (AdminService's activity and stock calls,
// OrderService.GetActivity and ListMyOrders) are served by WithSale's
// ports; without it they answer Unimplemented.
func NewHandler(orders ports.OrderService, admin ports.AdminService, events ports.EventSubscriptions, auth *Authenticator,
	log *slog.Logger, limits Limits, health grpchealth.Checker, obs Observability, options ...HandlerOption) (http.Handler, error) {
	var o handlerOptions
	for _, opt := range options {
		opt(&o)
	}
	if health == nil {
		names := []string{seckillv1connect.OrderServiceName, seckillv1connect.AdminServiceName}
		if events != nil {
			names = append(names, seckillv1connect.EventServiceName)
		}
		health = grpchealth.NewStaticChecker(names...)
	}
	lim := newLimiter(limits, time.Now)
	interceptors := []connect.Interceptor{obs.Metrics.interceptor(), streamGuard{metrics: obs.Metrics}}
	if obs.Tracer != nil { // tracing off: no span work on the hot path at all
		spans, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(obs.Tracer),
			otelconnect.WithPropagator(propagation.TraceContext{}), otelconnect.WithoutMetrics())
		if err != nil {
			return nil, fmt.Errorf("tracing interceptor: %w", err)
		}
		interceptors = append(interceptors, spans)
	}
	interceptors = append(interceptors, traceInterceptor(), authzInterceptor(), lim.interceptor())
	opts := connect.WithHandlerOptions(
		connect.WithInterceptors(interceptors...),
		connect.WithReadMaxBytes(limits.MaxMessageBytes),
		// Responses are a few dozen bytes: compressing them costs more
		// CPU (a gzip writer reset per response) than it saves.
		connect.WithCompressMinBytes(1024),
	)
	services := http.NewServeMux()
	services.Handle(seckillv1connect.NewOrderServiceHandler(NewOrderHandler(orders, o.sale.Buyers, log), opts))
	services.Handle(seckillv1connect.NewAdminServiceHandler(NewAdminHandler(admin, o.sale, log), opts))
	var eventHandler seckillv1connect.EventServiceHandler = seckillv1connect.UnimplementedEventServiceHandler{}
	if events != nil {
		eventHandler = NewEventHandler(events, log, limits)
	}
	eventsPath, eventsHTTP := seckillv1connect.NewEventServiceHandler(eventHandler, opts)
	services.Handle(eventsPath, withResponseController(eventsHTTP))
	mux := http.NewServeMux()
	mux.Handle(grpchealth.NewHandler(health, connect.WithReadMaxBytes(1<<10)))
	mountReflection(mux, nil, connect.WithReadMaxBytes(4<<10))
	mux.Handle("/", lim.perClient(limitBody(limits.MaxBodyBytes, closeUnauthenticated(auth.Middleware, services))))
	return mux, nil
}

// Observability is what the API records of each call: per-RPC metrics and
// a server span (OpenTelemetry, continuing the caller's traceparent). The
// zero value records neither.
type Observability struct {
	Metrics *RPCMetrics
	Tracer  trace.TracerProvider
}

// closeUnauthenticated wraps next in authn so that an HTTP/1 request the
// authentication refuses is answered with "Connection: close" (its
// connection does not stay open for IdleTimeout): the header is set
// before authn runs and taken back once the caller is authenticated. It
// costs an HTTP/1 request two header map operations and no allocation.
func closeUnauthenticated(authn func(http.Handler) http.Handler, next http.Handler) http.Handler {
	closeValue := []string{"close"} // never modified: net/http only reads it
	authed := authn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 {
			delete(w.Header(), "Connection")
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 {
			w.Header()["Connection"] = closeValue
		}
		authed.ServeHTTP(w, r)
	})
}

// ServerLimits bound what one connection may hold.
type ServerLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request (per stream on HTTP/2),
	// so a slow body is cut off.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with nothing in flight.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request headers (the HTTP/2 header list
	// too).
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the HTTP/2 streams one connection may
	// have open.
	MaxConcurrentStreams int
	// MaxConns bounds the connections open at once; one more is closed as
	// soon as it is accepted, before any of it is read. 0 means no bound.
	MaxConns int
	// MaxConnsPerClient bounds the connections open at once from one
	// client IP address (IPv6: one /64), the same way. 0 means no bound.
	MaxConnsPerClient int
}

// DefaultServerLimits are the connection limits of the API listener.
// ReadHeaderTimeout bounds HTTP/2 header blocks too: a connection whose
// first request has not arrived, or whose header block (HEADERS and its
// CONTINUATION frames) has not completed, within it is closed. The
// per-client cap leaves room for a load generator's 256 HTTP/1 clients on
// one address (each holds one connection) twice over.
func DefaultServerLimits() ServerLimits {
	return ServerLimits{ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10, MaxConcurrentStreams: 100,
		MaxConns: 4096, MaxConnsPerClient: 512}
}

// Server is the HTTP server (HTTP/1.1 and cleartext HTTP/2).
type Server struct {
	srv *http.Server
	// stopping is canceled when a shutdown begins: it ends the
	// long-lived streams (EventService), which would otherwise hold the
	// graceful shutdown for its whole drain period.
	stopping context.Context
	log      *slog.Logger
	lim      connLimits
	ln       atomic.Pointer[limitListener]
	addr     atomic.Pointer[net.Addr]
}

// NewServer returns a server for h on addr with limits l. When a shutdown
// begins, the EventService streams end (Unavailable: resume from the last
// position) while unary calls in flight complete within the drain period.
func NewServer(addr string, h http.Handler, log *slog.Logger, l ServerLimits) *Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	stopping, stop := context.WithCancel(context.Background())
	s := &Server{log: log, stopping: stopping, lim: connLimits{maxConns: l.MaxConns, maxPerClient: l.MaxConnsPerClient,
		headerTimeout: l.ReadHeaderTimeout}, srv: &http.Server{
		Addr:              addr,
		Handler:           h,
		Protocols:         p,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: l.MaxConcurrentStreams},
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), shutdownKey{}, stopping)
		},
	}}
	s.srv.RegisterOnShutdown(stop)
	return s
}

// Listen binds the server's address and returns it; Run serves on it.
// Calling Run without Listen listens first.
func (s *Server) Listen() (net.Addr, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", s.srv.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", s.srv.Addr, err)
	}
	s.ln.Store(newLimitListener(ln, s.lim))
	a := ln.Addr()
	s.addr.Store(&a)
	return a, nil
}

// Addr returns the bound address, or nil before Listen.
func (s *Server) Addr() net.Addr {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return nil
}

// ConnStats returns the counts of the connection guard (zero before
// Listen).
func (s *Server) ConnStats() ConnStats {
	ln := s.ln.Load()
	if ln == nil {
		return ConnStats{}
	}
	return ConnStats{Open: ln.open.Load(), Refused: ln.refused.Load(), HeaderTimeouts: ln.cut.Load()}
}

// Run serves until ctx is canceled, then shuts down gracefully within
// drain. ready, if non-nil, receives the bound address once listening.
func (s *Server) Run(ctx context.Context, drain time.Duration, ready func(addr net.Addr)) error {
	if s.ln.Load() == nil {
		if _, err := s.Listen(); err != nil {
			return err
		}
	}
	ln := s.ln.Load()
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		// Connections still open after the drain period (for example idle
		// HTTP/2 clients) are closed forcibly.
		s.log.Warn("graceful shutdown incomplete, closing connections", "error", err)
		if cerr := s.srv.Close(); cerr != nil {
			return fmt.Errorf("close: %w", cerr)
		}
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
