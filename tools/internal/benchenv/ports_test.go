package benchenv

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// TestFreePortIsBelowTheEphemeralRange: the ports handed to the processes
// a run starts lie below Linux's ephemeral range, where no outgoing
// connection takes them, and can be listened on.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	for range 50 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < firstPort || port >= 32768 {
			t.Fatalf("port %d outside %d-32767", port, firstPort)
		}
		var lc net.ListenConfig
		ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen on the free port %d: %v", port, err)
		}
		_ = ln.Close()
	}
}
