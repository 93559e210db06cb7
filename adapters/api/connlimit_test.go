package api_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/seckill-dev/seckill/adapters/api"
)

// serveLimited serves h with l on a loopback port and returns the server
// and its address.
func serveLimited(t *testing.T, h http.Handler, l api.ServerLimits) (*api.Server, string) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := api.NewServer("127.0.0.1:0", h, log, l)
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, time.Second, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return srv, addr.String()
}

func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
}

// dial opens a connection that the test closes when it ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// get sends one HTTP/1.1 GET on c and reads its answer.
func get(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	defer func() { _ = res.Body.Close() }()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", res.Status)
	}
	return nil
}

// serveOnce opens a connection, sends one GET and closes it; a refusal
// may show at dial (a reset) or at the request.
func serveOnce(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	return get(c, bufio.NewReader(c))
}

// closedByServer waits (at most within) for the server to close c and
// reports whether it did; bytes the server sends first (SETTINGS, GOAWAY)
// are read and dropped.
func closedByServer(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestConnectionCapsRefuseTheNextConnection: with two connections per
// client, a third from the same address is closed at once without an
// answer while the first two keep serving; once one closes, a new one is
// admitted. The total cap works the same way.
func TestConnectionCapsRefuseTheNextConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    api.ServerLimits
	}{
		{"per client", api.ServerLimits{MaxConnsPerClient: 2, IdleTimeout: time.Minute}},
		{"total", api.ServerLimits{MaxConns: 2, IdleTimeout: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, addr := serveLimited(t, okHandler(), tc.l)
			var held []net.Conn
			for range 2 {
				c := dial(t, addr)
				if err := get(c, bufio.NewReader(c)); err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			if err := serveOnce(addr); err == nil {
				t.Fatal("a third connection was served beyond a cap of two")
			}
			for _, c := range held {
				if err := get(c, bufio.NewReader(c)); err != nil {
					t.Fatalf("an admitted connection stopped serving: %v", err)
				}
			}
			if st := srv.ConnStats(); st.Refused != 1 || st.Open != 2 {
				t.Fatalf("stats %+v, want 1 refused and 2 open", st)
			}
			reg := prometheus.NewRegistry()
			if err := srv.RegisterConnMetrics(reg, "api"); err != nil {
				t.Fatal(err)
			}
			if got := gathered(t, reg, "http_connections_refused_total"); got != 1 {
				t.Fatalf("http_connections_refused_total = %v, want 1", got)
			}
			_ = held[0].Close()
			var err error
			for range 50 { // the server notices the close asynchronously
				if err = serveOnce(addr); err == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Fatalf("no connection admitted after one closed: %v", err)
		})
	}
}

// gathered returns the value of the single counter named name in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}

// h2Conn opens a cleartext HTTP/2 connection (prior knowledge) and
// returns its framer after the client preface and SETTINGS.
func h2Conn(t *testing.T, addr string) (net.Conn, *http2.Framer) {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c, fr
}

// requestBlock is the HPACK block of a GET of / (first half and second
// half, to split across HEADERS and CONTINUATION).
func requestBlock(t *testing.T) ([]byte, []byte) {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	// Never-indexed literals: the block leaves the dynamic table alone
	// and can be sent again.
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "GET", Sensitive: true},
		{Name: ":scheme", Value: "http", Sensitive: true},
		{Name: ":authority", Value: "127.0.0.1", Sensitive: true}, {Name: ":path", Value: "/", Sensitive: true}} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	b := buf.Bytes()
	return b[:len(b)/2], b[len(b)/2:]
}

// h2Answer reads frames until stream id's HEADERS arrive and returns the
// :status, or the error that ended the connection.
func h2Answer(c net.Conn, fr *http2.Framer, id uint32) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "", err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return f.PseudoValue("status"), nil
			}
		case *http2.GoAwayFrame:
			return "", fmt.Errorf("GOAWAY %v", f.ErrCode)
		}
	}
}

// TestHTTP2HeaderBlocksAreBounded: a header block left open after its
// HEADERS frame, and a fresh connection that sends no request, are closed
// within the header timeout (long before the idle timeout), while a
// complete block (split over CONTINUATION) is served and a connection
// that served a request may then stay idle beyond the header timeout.
func TestHTTP2HeaderBlocksAreBounded(t *testing.T) {
	const headerTimeout, idle = 300 * time.Millisecond, time.Minute
	srv, addr := serveLimited(t, okHandler(), api.ServerLimits{ReadHeaderTimeout: headerTimeout, IdleTimeout: idle})
	first, second := requestBlock(t)

	t.Run("a complete block split over CONTINUATION is served; idle afterwards is fine", func(t *testing.T) {
		c, fr := h2Conn(t, addr)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteContinuation(1, true, second); err != nil {
			t.Fatal(err)
		}
		if st, err := h2Answer(c, fr, 1); err != nil || st != "200" {
			t.Fatalf("status %q, %v", st, err)
		}
		time.Sleep(3 * headerTimeout) // longer than the header timeout, far below the idle timeout
		whole := append(append([]byte(nil), first...), second...)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: whole, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if st, err := h2Answer(c, fr, 3); err != nil || st != "200" {
			t.Fatalf("second request after an idle pause: status %q, %v", st, err)
		}
	})

	t.Run("a block left open is cut", func(t *testing.T) {
		c, fr := h2Conn(t, addr)
		whole := append(append([]byte(nil), first...), second...)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: whole, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if st, err := h2Answer(c, fr, 1); err != nil || st != "200" {
			t.Fatalf("status %q, %v", st, err)
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: first, EndStream: true}); err != nil {
			t.Fatal(err)
		}
		if !closedByServer(c, idle/2) {
			t.Fatal("a connection with an open header block was still open at half the idle timeout")
		}
	})

	t.Run("a fresh connection without a request is cut", func(t *testing.T) {
		c, _ := h2Conn(t, addr)
		if !closedByServer(c, idle/2) {
			t.Fatal("a connection that sent no request was still open at half the idle timeout")
		}
	})

	t.Run("a first block left open is cut", func(t *testing.T) {
		c, fr := h2Conn(t, addr)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true}); err != nil {
			t.Fatal(err)
		}
		if !closedByServer(c, idle/2) {
			t.Fatal("a connection whose first header block stayed open was still open at half the idle timeout")
		}
	})
	if st := srv.ConnStats(); st.HeaderTimeouts != 3 {
		t.Fatalf("header timeouts counted %d, want 3", st.HeaderTimeouts)
	}
}

// TestHTTP1KeepAliveOutlivesTheHeaderTimeout: the HTTP/2 header clock
// never closes an HTTP/1 connection; net/http bounds its header reads.
func TestHTTP1KeepAliveOutlivesTheHeaderTimeout(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	_, addr := serveLimited(t, okHandler(), api.ServerLimits{ReadHeaderTimeout: headerTimeout, IdleTimeout: time.Minute})
	c := dial(t, addr)
	br := bufio.NewReader(c)
	if err := get(c, br); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * headerTimeout)
	if err := get(c, br); err != nil {
		t.Fatalf("keep-alive request after a pause: %v", err)
	}
}
