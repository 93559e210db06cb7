package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer echoes every line it receives; it stops with the test.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if got != line+"\n" {
		t.Fatalf("echo = %q, want %q", got, line)
	}
}

func TestPassAndDelayForward(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	roundTrip(t, c, r, "hello")
	p.SetDelay(20 * time.Millisecond)
	roundTrip(t, c, r, "delayed")
	if m, d := p.Mode(); m != Delay || d != 20*time.Millisecond {
		t.Fatalf("mode = %v %v", m, d)
	}
}

func TestBlackholeHoldsBytesUntilPass(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	roundTrip(t, c, r, "before")

	p.SetBlackhole()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("read during blackhole: %v, want a timeout", err)
	}
	if p.Conns() != 1 {
		t.Fatalf("open connections = %d, want the connection kept open", p.Conns())
	}

	p.SetPass()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != "held\n" {
		t.Fatalf("after pass: %q, %v; want the held bytes", got, err)
	}
}

func TestResetClosesConnections(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	roundTrip(t, c, r, "x")

	p.SetReset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after reset succeeded")
	} else if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("read after reset: %v, want connection reset", err)
	}

	// New connections are reset while the mode lasts: the reset may even
	// reach the client before its connect returns.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c2.Close()
		_, _ = c2.Write([]byte("y\n"))
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
			t.Fatal("new connection not reset")
		}
	}

	p.SetPass()
	c3, r3 := dial(t, p)
	roundTrip(t, c3, r3, "back")
}

func TestCloseStopsEverything(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	roundTrip(t, c, r, "x")
	p.SetBlackhole()
	_, _ = c.Write([]byte("stuck\n"))
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if p.Conns() != 0 {
		t.Fatalf("connections after close = %d", p.Conns())
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
