// Package faultproxy is a TCP proxy for fault-injection tests: it listens on
// a loopback port, forwards every connection to a target address and can be
// switched at runtime between passing bytes through, delaying them, holding
// them (a network partition that keeps connections open) and resetting
// connections.
//
// It is a test helper: bootstrap and tests may import it, adapters may not.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is the proxy's behaviour.
type Mode int

// The modes.
const (
	// Pass forwards bytes as they arrive.
	Pass Mode = iota
	// Delay forwards each chunk of bytes after the configured delay.
	Delay
	// Blackhole forwards nothing in either direction and keeps the
	// connections open (new ones are accepted too): a partition. Bytes read
	// meanwhile are held (at most one chunk per direction in the proxy, the
	// rest in the kernel's buffers) and delivered in order once the mode
	// changes to Pass or Delay, like a healed partition.
	Blackhole
	// Reset closes every connection with a TCP RST (existing ones at once,
	// new ones as soon as they are accepted).
	Reset
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case Blackhole:
		return "blackhole"
	case Reset:
		return "reset"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DefaultMaxConns bounds the number of proxied connections (each uses two
// goroutines); further connections are closed at once.
const DefaultMaxConns = 64

const chunkSize = 32 << 10

// Proxy is a fault-injecting TCP proxy. Its methods are safe for concurrent
// use. Close stops every goroutine it started and waits for them.
type Proxy struct {
	ln     net.Listener
	target string
	max    int

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed and replaced on every mode change
	links   map[*link]struct{}
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// link is one proxied connection pair.
type link struct {
	client, server net.Conn
	once           sync.Once
	pumps          int // running pumps, guarded by Proxy.mu
}

// New starts a proxy listening on 127.0.0.1 (a free port) that forwards to
// target, in Pass mode.
func New(target string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy listen: %w", err)
	}
	p := &Proxy{
		ln: ln, target: target, max: DefaultMaxConns,
		changed: make(chan struct{}), links: map[*link]struct{}{}, done: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// SetMaxConns changes the bound on proxied connections (DefaultMaxConns at
// first); it applies to connections accepted from now on.
func (p *Proxy) SetMaxConns(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.max = n
}

// Addr returns the proxy's listening address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode and delay.
func (p *Proxy) Mode() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay
}

// SetPass forwards bytes as they arrive (and releases held bytes).
func (p *Proxy) SetPass() { p.set(Pass, 0) }

// SetDelay forwards each chunk after d (and releases held bytes).
func (p *Proxy) SetDelay(d time.Duration) { p.set(Delay, d) }

// SetBlackhole stops forwarding in both directions; connections stay open.
func (p *Proxy) SetBlackhole() { p.set(Blackhole, 0) }

// SetReset resets every current and future connection until the mode
// changes.
func (p *Proxy) SetReset() {
	p.set(Reset, 0)
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

func (p *Proxy) set(m Mode, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, d
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the current mode, delay and change channel.
func (p *Proxy) state() (Mode, time.Duration, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // transient accept error
			}
			continue
		}
		p.handle(c)
	}
}

// handle registers a new client connection and starts its pumps.
func (p *Proxy) handle(c net.Conn) {
	mode, _, _ := p.state()
	if mode == Reset {
		resetConn(c)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	s, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		resetConn(c)
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed || len(p.links) >= p.max {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	l.pumps = 2
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pump(l, l.client, l.server)
	go p.pump(l, l.server, l.client)
}

// pump copies src to dst according to the mode until either side fails.
func (p *Proxy) pump(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	defer p.unlink(l)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.forward(l, dst, buf[:n]) {
			return
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite() // half-close: let the other direction finish
					return
				}
			}
			l.close()
			return
		}
	}
}

// forward writes b to dst once the mode allows; false means the link is
// finished.
func (p *Proxy) forward(l *link, dst net.Conn, b []byte) bool {
	for {
		mode, delay, changed := p.state()
		switch mode {
		case Pass:
			_, err := dst.Write(b)
			return err == nil
		case Delay:
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
				return false
			}
			_, err := dst.Write(b)
			return err == nil
		case Blackhole:
			select {
			case <-changed:
				continue
			case <-p.done:
				return false
			}
		default: // Reset
			l.reset()
			return false
		}
	}
}

// unlink forgets and closes l when its last pump ends.
func (p *Proxy) unlink(l *link) {
	p.mu.Lock()
	l.pumps--
	last := l.pumps == 0
	if last {
		delete(p.links, l)
	}
	p.mu.Unlock()
	if last {
		l.close()
	}
}

// close closes both sides of the link.
func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// reset closes both sides with RST.
func (l *link) reset() {
	l.once.Do(func() {
		resetConn(l.client)
		resetConn(l.server)
	})
}

// resetConn closes c so that the peer sees a TCP RST.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
