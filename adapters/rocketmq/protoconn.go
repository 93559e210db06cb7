package rocketmq

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	rmqmd "github.com/apache/rocketmq-clients/golang/v5/metadata"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// protoConn is a gRPC connection of the adapter's own to the proxy, for the
// calls of the RocketMQ 5 protocol that the v5.1.2 Go client makes one
// message at a time (SendMessage, AckMessage) while the protocol carries
// many. It uses TLS without verification like the client library, or
// plain text with Config.Plaintext (the proxy accepts both), and the
// library's request signing headers under a client id of its own. It never
// makes the telemetry handshake: the proxy serves sends and
// acknowledgements without client settings (docs/local-stack.md,
// correction 22). Safe for concurrent use.
type protoConn struct {
	conn     *grpc.ClientConn
	client   v2.MessagingServiceClient
	cfg      Config
	clientID string
	host     string
	seq      atomic.Uint64
}

// dialProto opens a protoConn to cfg.Endpoint (honouring a test redirect,
// see RedirectDials); role goes into the client id.
func dialProto(cfg Config, role string) (*protoConn, error) {
	creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as the client library
	if cfg.Plaintext {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8 << 20)),
		// Reconnect within a second of a restarted proxy (gRPC's default
		// backoff grows to two minutes while the proxy is down).
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
	}
	if to := redirectOf(cfg.Endpoint); to != "" {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", to)
		}))
	}
	conn, err := grpc.NewClient(cfg.Endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s connection: %w", role, err)
	}
	// Connect now rather than at the first call: a sale's first sends
	// would otherwise spend their send bound waiting for the handshake
	// and end UNKNOWN.
	conn.Connect()
	host, _ := os.Hostname()
	return &protoConn{conn: conn, client: v2.NewMessagingServiceClient(conn), cfg: cfg, host: host,
		clientID: fmt.Sprintf("%s@%d@%s@%d", host, os.Getpid(), role, time.Now().UnixNano())}, nil
}

// sign adds the headers the client library sends with every request
// (client.go Sign of v5.1.2): language, protocol, version, client id,
// request id, and the HMAC-SHA1 authorization of the current time.
func (p *protoConn) sign(ctx context.Context) context.Context {
	now := time.Now().Format("20060102T150405Z")
	h := hmac.New(sha1.New, []byte(p.cfg.AccessSecret))
	h.Write([]byte(now))
	auth := fmt.Sprintf("%s %s=%s/%s/%s, %s=%s, %s=%s", rmqmd.EncryptHeader, rmqmd.Credential, p.cfg.AccessKey, "",
		rmqmd.Rocketmq, rmqmd.SignedHeaders, rmqmd.DateTime, rmqmd.Signature, hex.EncodeToString(h.Sum(nil)))
	return metadata.AppendToOutgoingContext(ctx,
		rmqmd.LanguageKey, rmqmd.LanguageValue, rmqmd.ProtocolKey, rmqmd.ProtocolValue,
		rmqmd.VersionKey, rmqmd.VersionValue, rmqmd.ClintID, p.clientID,
		rmqmd.RequestID, strconv.FormatUint(p.seq.Add(1), 10), rmqmd.DateTime, now, rmqmd.Authorization, auth)
}

// Close closes the connection.
func (p *protoConn) Close() error { return p.conn.Close() }
