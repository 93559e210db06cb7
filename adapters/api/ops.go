package api

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"connectrpc.com/connect"
)

// OpsOptions guard the operations listener.
type OpsOptions struct {
	Token string   // empty: no token asked
	Hosts []string // Host names accepted besides IP literals and "localhost"
}

// NewOpsHandler returns the operations handler, meant for a listener of
// its own (loopback by default): gRPC reflection (v1 and v1alpha) of both
// services plus routes (for example /metrics and /healthz).
//
// Every request's Host header must name an IP literal, "localhost" or one
// of opts.Hosts (case-insensitive, any port), so that a web page cannot
// reach the listener through DNS rebinding; any other host is answered
// 421 Misdirected Request. With opts.Token set, every request except the
// probes /livez, /healthz and /readyz (they reveal nothing) needs
// "Authorization: Bearer <token>" (compared in constant time), reflection
// included; without it the answer is 401.
func NewOpsHandler(opts OpsOptions, routes ...Route) http.Handler {
	mux := http.NewServeMux()
	mountReflection(mux, nil)
	for _, r := range routes {
		mux.Handle(r.Pattern, r.Handler)
	}
	g := opsGuard{token: []byte(opts.Token), hosts: make(map[string]struct{}, len(opts.Hosts)), next: mux,
		ew: connect.NewErrorWriter()}
	for _, h := range opts.Hosts {
		g.hosts[strings.ToLower(strings.TrimSpace(h))] = struct{}{}
	}
	return g
}

// opsGuard checks the Host header and the operations token.
type opsGuard struct {
	token []byte
	hosts map[string]struct{}
	next  http.Handler
	ew    *connect.ErrorWriter
}

func (g opsGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hostAllowed(r.Host) {
		http.Error(w, "misdirected request: host not served here", http.StatusMisdirectedRequest)
		return
	}
	if len(g.token) > 0 && !isProbe(r.URL.Path) && !g.tokenMatches(r.Header.Get("Authorization")) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="seckill-ops"`)
		if g.ew.IsSupported(r) { // reflection: answer in gRPC
			_ = g.ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(opsTokenMessage)))
			return
		}
		http.Error(w, opsTokenMessage, http.StatusUnauthorized)
		return
	}
	g.next.ServeHTTP(w, r)
}

// opsTokenMessage is the answer to a request without the operations
// token.
const opsTokenMessage = "missing or wrong operations token"

// hostAllowed reports whether hostport (a Host header) names this
// listener: an IP literal, "localhost" or a configured name.
func (g opsGuard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if host == "localhost" {
		return true
	}
	_, ok := g.hosts[host]
	return ok
}

// tokenMatches compares the bearer token of an Authorization header with
// the configured one in constant time.
func (g opsGuard) tokenMatches(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), g.token) == 1
}

// isProbe reports whether path is one of the probes that answer without
// the operations token.
func isProbe(path string) bool {
	switch path {
	case "/livez", "/healthz", "/readyz":
		return true
	}
	return false
}
