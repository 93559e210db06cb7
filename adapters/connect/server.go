// Package connect is the driving adapter: it serves seckill.v1.OrderService
// and seckill.v1.AdminService with Connect, gRPC and gRPC-Web on one h2c
// port, together with gRPC health, gRPC reflection and any extra handlers
// (for example /metrics). It authenticates every call (JWT HS256 bearer
// tokens), validates requests (InvalidArgument naming the field) and maps
// application errors to Connect codes in one function, toConnectError,
// never leaking internals to clients.
package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Route is an extra HTTP handler mounted beside the services.
type Route struct {
	Pattern string
	Handler http.Handler
}

// NewHandler returns the HTTP handler serving both services (behind auth),
// health (grpc.health.v1, SERVING for both services) and reflection (v1
// and v1alpha), plus routes.
func NewHandler(orders ports.OrderService, admin ports.AdminService, auth *Authenticator, log *slog.Logger, routes ...Route) http.Handler {
	mux := http.NewServeMux()
	opts := connect.WithHandlerOptions(
		connect.WithInterceptors(traceInterceptor(), auth.Interceptor("/"+seckillv1connect.AdminServiceName+"/")),
		// Responses are a few dozen bytes: compressing them costs more
		// CPU (a gzip writer reset per response) than it saves.
		connect.WithCompressMinBytes(1024),
	)
	mux.Handle(seckillv1connect.NewOrderServiceHandler(NewOrderHandler(orders, log), opts))
	mux.Handle(seckillv1connect.NewAdminServiceHandler(NewAdminHandler(admin, log), opts))
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(
		seckillv1connect.OrderServiceName, seckillv1connect.AdminServiceName)))
	reflector := grpcreflect.NewStaticReflector(seckillv1connect.OrderServiceName, seckillv1connect.AdminServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	for _, r := range routes {
		mux.Handle(r.Pattern, r.Handler)
	}
	return mux
}

// Server is the HTTP server (HTTP/1.1 and cleartext HTTP/2).
type Server struct {
	srv *http.Server
	log *slog.Logger
}

// NewServer returns a server for h on addr.
func NewServer(addr string, h http.Handler, log *slog.Logger) *Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &Server{log: log, srv: &http.Server{
		Addr:              addr,
		Handler:           h,
		Protocols:         p,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}}
}

// Run listens and serves until ctx is canceled, then shuts down
// gracefully within drain. ready, if non-nil, receives the bound address
// once listening.
func (s *Server) Run(ctx context.Context, drain time.Duration, ready func(addr net.Addr)) error {
	ln, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.srv.Addr, err)
	}
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
