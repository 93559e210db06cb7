package rabbitmq

import (
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// publishSendBuffer is the kernel send buffer asked for the publisher's
// connection (SO_SNDBUF; the kernel caps it at net.core.wmem_max). While
// the broker's flow control pauses reading the connection (a quorum
// queue behind), the writes of the publish pipeline go on into this
// buffer instead of blocking: a message written there is committed to
// the connection (UNKNOWN if its confirmation does not come in time),
// where one queued behind a blocked write is not written at all
// (DEFINITE_FAILURE at its deadline). Left to autotuning the buffer was
// about 64 KiB under a sale's load (about 60 ORDER_CREATE messages), and
// the broker's pauses outlasted it. 4 MiB bounds what a pause can queue.
const publishSendBuffer = 4 << 20

// dialSendBuffer is amqp.DefaultDial(timeout) that also sets the TCP
// connection's send buffer to size bytes.
func dialSendBuffer(timeout time.Duration, size int) func(network, addr string) (net.Conn, error) {
	base := amqp.DefaultDial(timeout)
	return func(network, addr string) (net.Conn, error) {
		conn, err := base(network, addr)
		if err != nil {
			return nil, err
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			if err := tc.SetWriteBuffer(size); err != nil {
				_ = conn.Close()
				return nil, fmt.Errorf("set the send buffer of %s: %w", addr, err)
			}
		}
		return conn, nil
	}
}
