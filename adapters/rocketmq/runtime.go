package rocketmq

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The Go client library keeps its configuration in process-wide state that
// no per-client option reaches:
//
//   - its own log (rocketmq_client_go.log) is configured from environment
//     variables read by golang.ResetLogger, by default under
//     $user.home/logs/rocketmqlogs, which is /logs/rocketmqlogs;
//   - a gRPC interceptor logs every unary call to /tmp/rocketmq-logger.log
//     unless the connection gets another zap logger, and the connection
//     options are only reachable by replacing the exported package variable
//     golang.NewRpcClient, which the client manager calls with the target
//     only (WithConnOptions / WithRpcClientOptions are never read);
//   - likewise a gRPC dialer (used here for test fault injection) and a
//     stream interceptor (used to neutralise the library's data race on the
//     settings it receives, see stripSettings) can only be added there.
//
// clientRuntime owns that state. It is installed once per process, by the
// first constructor (NewPublisher / NewRunner) that runs; it is the only
// package-level variable of this package, made necessary by the library.
type clientRuntime struct {
	mu        sync.Mutex
	installed bool
	logDir    string
	grpcLog   *zap.Logger
	original  func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error)
	redirects map[string]string
	plaintext bool // the library's connections dial without TLS (Config.Plaintext)
}

var clientRT clientRuntime

// installRuntime configures the library's process-wide state from cfg the
// first time it is called; later calls only warn when they ask for another
// log directory.
func installRuntime(cfg Config, log *slog.Logger) error {
	clientRT.mu.Lock()
	defer clientRT.mu.Unlock()
	if clientRT.installed {
		if filepath.Clean(cfg.ClientLogDir) != clientRT.logDir {
			log.Warn("rocketmq client log directory already set for this process; ignoring the new one",
				slog.String("log_dir", clientRT.logDir), slog.String("ignored_log_dir", cfg.ClientLogDir))
		}
		if cfg.Plaintext != clientRT.plaintext {
			log.Warn("rocketmq client library's TLS setting already set for this process; ignoring the new one",
				slog.Bool("plaintext", clientRT.plaintext))
		}
		return nil
	}
	dir := filepath.Clean(cfg.ClientLogDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("rocketmq client log directory: %w", err)
	}
	for k, v := range map[string]string{
		rmq.CLIENT_LOG_ROOT:         dir,
		rmq.CLIENT_LOG_LEVEL:        strings.ToLower(cfg.ClientLogLevel),
		rmq.CLIENT_LOG_FILENAME:     "rocketmq_client_go.log",
		rmq.ENABLE_CONSOLE_APPENDER: "false",
	} {
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("configure rocketmq client log: %w", err)
		}
	}
	rmq.ResetLogger()

	// The interceptor logs every unary call at info and, on failure, the
	// whole request with zap.Any at error level; zap encodes With fields
	// eagerly whatever the level, which costs about 0.5 s for a 3 MiB body
	// and is not bounded by the call's deadline. A no-op logger skips the
	// encoding; failures are logged by this adapter with their
	// classification instead.
	clientRT.grpcLog = zap.NewNop()
	clientRT.original = rmq.NewRpcClient
	clientRT.redirects = map[string]string{}
	clientRT.logDir = dir
	clientRT.plaintext = cfg.Plaintext
	rmq.NewRpcClient = newRPCClient
	clientRT.installed = true
	log.Info("rocketmq client runtime installed", slog.String("log_dir", dir))
	return nil
}

// newRPCClient replaces golang.NewRpcClient: it adds the interceptor's
// logger, plain-text credentials when the runtime says so, the settings filter (stripSettings), the broker target of receives
// (targetBroker) and, when a dial redirect for target is active at creation time, a
// dialer that connects to the redirect's address for the whole life of the
// connection (gRPC reconnects included).
func newRPCClient(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
	clientRT.mu.Lock()
	orig, logger, to, plain := clientRT.original, clientRT.grpcLog, clientRT.redirects[target], clientRT.plaintext
	clientRT.mu.Unlock()
	conn := []rmq.ConnOption{
		rmq.WithZapLogger(logger),
		rmq.WithDialOptions(grpc.WithChainStreamInterceptor(stripSettings, targetBroker)),
	}
	if plain {
		// Applied after the library's own TLS credentials, so it wins.
		conn = append(conn, rmq.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	}
	if to != "" {
		conn = append(conn, rmq.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", to)
		})))
	}
	return orig(target, append(opts, rmq.WithRpcClientConnOption(conn...))...)
}

// telemetryMethod is the bidirectional stream that carries the client's
// settings and the proxy's answer.
const telemetryMethod = "/apache.rocketmq.v2.MessagingService/Telemetry"

// stripSettings removes the backoff policy and the metric settings from
// the settings the proxy sends on the telemetry stream.
//
// The v5.1.2 library applies them from the stream's receive goroutine
// without synchronization: producerSettings.applySettingsCommand replaces
// the retry policy that every later settings message (sent at each new
// topic's route lookup and every 5 minutes) marshals from another goroutine,
// and clientMeterProvider.Reset replaces the meter that every send reads.
// Both are data races (reported by -race on every producer start). Neither
// setting matters here: the backoff policy only spaces send retries (this
// adapter sends once) and the metric settings configure the library's own
// OpenTelemetry export (unused). The other settings (message type
// validation, maximum body size) are atomics and still apply.
func stripSettings(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != telemetryMethod {
		return cs, err
	}
	return settingsStripper{cs}, nil
}

type settingsStripper struct{ grpc.ClientStream }

// RecvMsg implements grpc.ClientStream.
func (s settingsStripper) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if tc, ok := m.(*v2.TelemetryCommand); ok {
		if st := tc.GetSettings(); st != nil {
			st.BackoffPolicy = nil
			st.Metric = nil
		}
	}
	return nil
}

// redirectOf returns where RedirectDials sends connections to target, ""
// when nowhere (the batch sender dials the proxy itself and honours it).
func redirectOf(target string) string {
	clientRT.mu.Lock()
	defer clientRT.mu.Unlock()
	return clientRT.redirects[target]
}

// RedirectDials makes every gRPC connection that the RocketMQ client library
// creates for target ("host:port" as the proxy's route names it, for the
// local stack the Endpoint itself) while the redirect is active dial to
// instead; a connection keeps its redirect for its whole life. It is meant
// for fault-injection tests (a TCP fault proxy in front of the broker's
// gRPC port): the route the proxy returns names the broker's own address,
// and the library offers no per-client dialer.
//
// The redirect is process-wide: clients created by concurrently running
// code (parallel tests of the same package) are redirected too, so use it
// from non-parallel tests only, and create the clients to redirect between
// RedirectDials and the returned restore function. The runtime must be
// installed first (any NewPublisher / NewRunner call, or InstallRuntime).
func RedirectDials(target, to string) (restore func(), err error) {
	clientRT.mu.Lock()
	defer clientRT.mu.Unlock()
	if !clientRT.installed {
		return nil, fmt.Errorf("redirect dials: rocketmq client runtime not installed")
	}
	if _, busy := clientRT.redirects[target]; busy {
		return nil, fmt.Errorf("redirect dials: %s is already redirected", target)
	}
	clientRT.redirects[target] = to
	return func() {
		clientRT.mu.Lock()
		defer clientRT.mu.Unlock()
		delete(clientRT.redirects, target)
	}, nil
}

// InstallRuntime installs the client library's process-wide configuration
// (log directory and level, gRPC connection hooks) from cfg, as the first
// NewPublisher or NewRunner would. Calling it early (in main, or in a test helper) makes the
// choice explicit; later calls keep the first directory.
func InstallRuntime(cfg Config, log *slog.Logger) error {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return installRuntime(cfg, log)
}

// clientConfig builds the library's client configuration.
func clientConfig(cfg Config, group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      cfg.Endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{AccessKey: cfg.AccessKey, AccessSecret: cfg.AccessSecret},
	}
}

// clientFunc returns a client constructor that applies cfg.RequestTimeout.
func clientFunc(cfg Config) rmq.NewClientFunc {
	return func(c *rmq.Config, opts ...rmq.ClientOption) (rmq.Client, error) {
		return rmq.NewClient(c, append(opts, rmq.WithQueryRouteTimeout(cfg.RequestTimeout))...)
	}
}
