package api

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// connLimits are what the listener wrapper enforces per accepted
// connection.
type connLimits struct {
	// maxConns bounds the connections open at once (0: no bound).
	maxConns int
	// maxPerClient bounds the connections open at once from one client
	// IP address (0: no bound).
	maxPerClient int
	// headerTimeout bounds, on HTTP/2, the first request's header block
	// from the connection's accept and every later header block from its
	// first HEADERS frame to the frame carrying END_HEADERS (0: no bound;
	// HTTP/1 header reads are bounded by the server itself).
	headerTimeout time.Duration
}

// limitListener wraps a net.Listener: beyond a connection cap (total or
// per client address) a new connection is closed as soon as it is
// accepted, before any byte of it is read and without a goroutine; every
// admitted connection is watched for slow HTTP/2 header blocks.
type limitListener struct {
	net.Listener
	lim     connLimits
	open    atomic.Int64
	refused atomic.Int64
	cut     atomic.Int64

	mu        sync.Mutex
	perClient map[netip.Addr]int
}

func newLimitListener(ln net.Listener, lim connLimits) *limitListener {
	return &limitListener{Listener: ln, lim: lim, perClient: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the caps; connections beyond
// them are closed and counted, and Accept goes on waiting.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(c.RemoteAddr())
		if !l.admit(addr) {
			l.refused.Add(1)
			// Close at once: the peer sees a reset or EOF, nothing is read
			// and nothing lingers.
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		return newLimitedConn(c, l, addr), nil
	}
}

// admit takes a slot for a connection from addr, or reports that a cap is
// reached.
func (l *limitListener) admit(addr netip.Addr) bool {
	if n := l.open.Add(1); l.lim.maxConns > 0 && n > int64(l.lim.maxConns) {
		l.open.Add(-1)
		return false
	}
	if l.lim.maxPerClient <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perClient[addr] >= l.lim.maxPerClient {
		l.open.Add(-1)
		return false
	}
	l.perClient[addr]++
	return true
}

// release gives back the slot of a closed connection from addr.
func (l *limitListener) release(addr netip.Addr) {
	l.open.Add(-1)
	if l.lim.maxPerClient <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.perClient[addr] - 1; n > 0 {
		l.perClient[addr] = n
	} else {
		delete(l.perClient, addr)
	}
}

// clientAddr is the client key of a remote address (the zero Addr when it
// has none, so that every such connection shares one budget).
func clientAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return clientKey(ip)
		}
	}
	if a == nil {
		return netip.Addr{}
	}
	return remoteIP(a.String())
}

// clientKey is the budget key of a client IP address: an IPv4 address as
// it is, an IPv6 address by its /64 (one host usually holds a whole /64,
// so keying by the full address would let it rotate through 2^64
// budgets).
func clientKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap()
	if ip.Is6() {
		if p, err := ip.WithZone("").Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// ConnStats are the counts of the API listener's connection guard.
type ConnStats struct {
	// Open is the number of connections open now.
	Open int64
	// Refused counts connections closed at accept because a cap was
	// reached.
	Refused int64
	// HeaderTimeouts counts HTTP/2 connections closed because a request's
	// header block did not complete within the header timeout.
	HeaderTimeouts int64
}

// h2Preface is what an HTTP/2 client with prior knowledge sends first.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HTTP/2 frame types and the flag this wrapper looks at (RFC 9113 §6).
const (
	h2FrameHeaders      = 0x1
	h2FrameContinuation = 0x9
	h2FlagEndHeaders    = 0x4
	h2FrameHeaderLen    = 9
)

// limitedConn is an admitted connection. It gives its slot back once on
// Close, and on HTTP/2 it follows the frame headers as they are read (no
// copy, no allocation: a few bytes of state) to bound header blocks with a
// timer that closes the connection:
//   - armed at accept until the first complete header block (HEADERS with
//     END_HEADERS, or the CONTINUATION ending it) arrives, so that a fresh
//     connection that sends no request is closed;
//   - armed by a HEADERS frame without END_HEADERS and stopped by the
//     CONTINUATION frame that carries it.
//
// An HTTP/1 connection (its first bytes are not the HTTP/2 preface) stops
// the timer at once: net/http bounds its header reads (ReadHeaderTimeout).
// Idle HTTP/2 connections are closed by net/http after IdleTimeout.
type limitedConn struct {
	net.Conn
	l      *limitListener
	addr   netip.Addr
	closed atomic.Bool
	timer  *time.Timer // nil: no header timeout

	// Read state; Read is called by one goroutine at a time (net/http
	// serializes it), the mutex makes that explicit and costs nothing
	// uncontended.
	mu        sync.Mutex
	mode      uint8 // connUnknown, connHTTP1, connHTTP2
	preface   int   // bytes of the preface matched so far
	hdr       [h2FrameHeaderLen]byte
	hdrN      int
	skip      int  // payload bytes of the current frame still to pass
	inBlock   bool // a header block is open (HEADERS without END_HEADERS)
	requested bool // a complete header block was seen
	armed     bool // the timer runs
}

const (
	connUnknown uint8 = iota
	connHTTP1
	connHTTP2
)

func newLimitedConn(c net.Conn, l *limitListener, addr netip.Addr) *limitedConn {
	lc := &limitedConn{Conn: c, l: l, addr: addr}
	if d := l.lim.headerTimeout; d > 0 {
		lc.armed = true
		lc.timer = time.AfterFunc(d, lc.headerTimedOut)
	}
	return lc
}

// headerTimedOut closes a connection whose header block is late.
func (c *limitedConn) headerTimedOut() {
	if c.closed.Load() {
		return
	}
	c.l.cut.Add(1)
	_ = c.Close()
}

// Close closes the connection and gives its slot back (once).
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		if c.timer != nil {
			c.timer.Stop()
		}
		c.l.release(c.addr)
	}
	if err != nil && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Read reads from the connection and follows HTTP/2 frame headers.
func (c *limitedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.timer != nil {
		c.mu.Lock()
		if c.mode != connHTTP1 {
			c.observe(p[:n])
		}
		c.mu.Unlock()
	}
	return n, err
}

// observe advances the frame state over b, the bytes just read.
func (c *limitedConn) observe(b []byte) {
	if c.mode == connUnknown {
		for c.preface < len(h2Preface) && len(b) > 0 {
			if b[0] != h2Preface[c.preface] {
				c.mode = connHTTP1
				c.armed = false
				c.timer.Stop()
				return
			}
			c.preface++
			b = b[1:]
		}
		if c.preface < len(h2Preface) {
			return
		}
		c.mode = connHTTP2
	}
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := copy(c.hdr[c.hdrN:], b)
		c.hdrN += k
		b = b[k:]
		if c.hdrN < h2FrameHeaderLen {
			return
		}
		c.hdrN = 0
		c.skip = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
		c.frame(c.hdr[3], c.hdr[4])
	}
}

// frame handles one frame header of type typ with flags. Before the
// first request the accept clock keeps running (a late HEADERS frame does
// not restart it); later, a header block left open starts a clock of its
// own.
func (c *limitedConn) frame(typ, flags byte) {
	end := flags&h2FlagEndHeaders != 0
	switch {
	case typ == h2FrameHeaders && !end:
		c.inBlock = true
		if c.requested && !c.armed {
			c.armed = true
			c.timer.Reset(c.l.lim.headerTimeout)
		}
	case (typ == h2FrameHeaders || typ == h2FrameContinuation && c.inBlock) && end:
		c.inBlock = false
		c.requested = true
		if c.armed {
			c.armed = false
			c.timer.Stop()
		}
	}
}

// RegisterConnMetrics exports the connection guard's counts with reg, each
// labeled listener="<name>": http_connections_open,
// http_connections_refused_total (closed at accept by a cap) and
// http2_header_timeouts_total (closed because a header block was late).
func (s *Server) RegisterConnMetrics(reg prometheus.Registerer, name string) error {
	labels := prometheus.Labels{"listener": name}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "http_connections_open", ConstLabels: labels,
			Help: "Connections open on the listener."}, func() float64 { return float64(s.ConnStats().Open) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "http_connections_refused_total", ConstLabels: labels,
			Help: "Connections closed at accept because the total or per-client cap was reached."},
			func() float64 { return float64(s.ConnStats().Refused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "http2_header_timeouts_total", ConstLabels: labels,
			Help: "HTTP/2 connections closed because a request's header block did not complete within the header timeout."},
			func() float64 { return float64(s.ConnStats().HeaderTimeouts) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register connection metrics of %s: %w", name, err)
		}
	}
	return nil
}
