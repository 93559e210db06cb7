package api

import (
	"net"
	"net/netip"
	"testing"
)

// TestClientKey: IPv4 (also 4-in-6) keys by the address, IPv6 by its /64,
// from a TCP address and from a request's RemoteAddr alike.
func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ remote, want string }{
		{"127.0.0.1:5000", "127.0.0.1"},
		{"[::ffff:10.0.0.7]:5000", "10.0.0.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff::1]:443", "2001:db8:1:2::"},
		{"[fe80::1%eth0]:80", "fe80::"},
		{"not an address", "invalid IP"},
	} {
		if got := remoteIP(tc.remote).String(); got != tc.want {
			t.Errorf("remoteIP(%q) = %s, want %s", tc.remote, got, tc.want)
		}
		if ap, err := netip.ParseAddrPort(tc.remote); err == nil {
			if got := clientAddr(net.TCPAddrFromAddrPort(ap)).String(); got != tc.want {
				t.Errorf("clientAddr(%q) = %s, want %s", tc.remote, got, tc.want)
			}
		}
	}
}
