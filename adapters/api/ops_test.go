package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/seckill-dev/seckill/adapters/api"
)

// opsStatus answers one request to h for path with Host host and the
// Authorization header auth (none when empty).
func opsStatus(t *testing.T, h http.Handler, host, path, auth string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
	req.Host = host
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestOpsHandlerChecksTheHost: IP literals, localhost and configured
// names pass (any case, any port); any other Host header is 421, on every
// route (DNS rebinding).
func TestOpsHandlerChecksTheHost(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	h := api.NewOpsHandler(api.OpsOptions{Hosts: []string{"Ops.Internal"}},
		api.Route{Pattern: "/metrics", Handler: ok}, api.Route{Pattern: "/healthz", Handler: ok})
	for _, host := range []string{"127.0.0.1:7081", "127.0.0.1", "[::1]:7081", "10.1.2.3", "localhost:7081", "LOCALHOST",
		"ops.internal:7081", "OPS.INTERNAL"} {
		if code := opsStatus(t, h, host, "/metrics", ""); code != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"evil.example", "evil.example:7081", "localhost.evil.example", "ops.internal.evil", ""} {
		for _, path := range []string{"/metrics", "/healthz"} {
			if code := opsStatus(t, h, host, path, ""); code != http.StatusMisdirectedRequest {
				t.Errorf("Host %q %s: %d, want 421", host, path, code)
			}
		}
	}
}

// TestOpsHandlerToken: with a token, every route but the probes needs it,
// reflection included; the probes answer without it.
func TestOpsHandlerToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	const tok = "ops-token-0123456789"
	h := api.NewOpsHandler(api.OpsOptions{Token: tok}, api.Route{Pattern: "/metrics", Handler: ok},
		api.Route{Pattern: "/livez", Handler: ok}, api.Route{Pattern: "/healthz", Handler: ok},
		api.Route{Pattern: "/readyz", Handler: ok})
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + tok + "x", tok} {
		if code := opsStatus(t, h, "127.0.0.1", "/metrics", auth); code != http.StatusUnauthorized {
			t.Errorf("/metrics with %q: %d, want 401", auth, code)
		}
	}
	if code := opsStatus(t, h, "127.0.0.1", "/metrics", "Bearer "+tok); code != http.StatusOK {
		t.Errorf("/metrics with the token: %d, want 200", code)
	}
	for _, probe := range []string{"/livez", "/healthz", "/readyz"} {
		if code := opsStatus(t, h, "127.0.0.1", probe, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", probe, code)
		}
	}
	if code := opsStatus(t, h, "evil.example", "/healthz", ""); code != http.StatusMisdirectedRequest {
		t.Errorf("a probe with a foreign Host: %d, want 421", code)
	}

	_, addr := serveLimited(t, h, api.ServerLimits{})
	base := "http://" + addr
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	rc := connect.NewClient[reflectionpb.ServerReflectionRequest, reflectionpb.ServerReflectionResponse](client,
		base+"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", connect.WithGRPC())
	stream := rc.CallBidiStream(context.Background())
	_ = stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	})
	_ = stream.CloseRequest()
	if _, err := stream.Receive(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("reflection without the token: %v, want Unauthenticated", err)
	}
	_ = stream.CloseResponse()
	names := listServices(t, client, base, connect.WithInterceptors(bearer(tok)))
	if !strings.Contains(names, "seckill.v1.OrderService") {
		t.Fatalf("reflection with the token lists %q", names)
	}
}

// bearer sets "Authorization: Bearer tok" on every outgoing request.
func bearer(tok string) connect.Interceptor { return bearerInterceptor(tok) }

type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
