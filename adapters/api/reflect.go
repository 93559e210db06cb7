package api

import (
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	// The error details the API attaches (google/rpc/error_details.proto)
	// are registered by this import, so reflection resolves
	// google.rpc.ErrorInfo and google.rpc.BadRequest by name and a
	// standard client decodes the details of an error.
	_ "google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// reflectionServices are the services gRPC reflection lists.
func reflectionServices() []string {
	return []string{seckillv1connect.OrderServiceName, seckillv1connect.AdminServiceName, seckillv1connect.EventServiceName}
}

// newReflector returns the reflector of the services. Its resolver is the
// process's registry of linked descriptors, which holds the services, their
// dependencies and the error details.
func newReflector() *grpcreflect.Reflector {
	return grpcreflect.NewStaticReflector(reflectionServices()...)
}

// mountReflection serves reflection v1 and v1alpha on mux, each request
// passed through wrap (nil: none).
func mountReflection(mux *http.ServeMux, wrap func(http.Handler) http.Handler, opts ...connect.HandlerOption) {
	r := newReflector()
	for _, mount := range []func(*grpcreflect.Reflector, ...connect.HandlerOption) (string, http.Handler){
		grpcreflect.NewHandlerV1, grpcreflect.NewHandlerV1Alpha,
	} {
		path, h := mount(r, opts...)
		if wrap != nil {
			h = wrap(h)
		}
		mux.Handle(path, h)
	}
}
