package api

import (
	"encoding/base64"
	"fmt"
	"testing"
)

// TestHeaderCache: a header that parsed is answered from the cache the
// next time, one that did not parse is refused every time and never kept,
// and the cache holds at most maxCachedHeaders (a header beyond that is
// still parsed and accepted).
func TestHeaderCache(t *testing.T) {
	var c headerCache
	enc := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	good := enc(`{"alg":"HS256","typ":"JWT"}`)
	for range 2 {
		h, err := c.parse(good)
		if err != nil || h.Alg != "HS256" {
			t.Fatalf("parse %s: %+v, %v", good, h, err)
		}
	}
	for _, bad := range []string{enc(`{"alg":"HS256","crit":["b64"]}`), enc(`{"alg":"HS256","alg":"none"}`), "not base64!"} {
		for range 2 {
			if _, err := c.parse(bad); err == nil {
				t.Fatalf("parse %q: accepted", bad)
			}
		}
		if _, kept := c.m[bad]; kept {
			t.Fatalf("a header that did not parse was kept: %q", bad)
		}
	}
	for i := range maxCachedHeaders + 10 {
		h, err := c.parse(enc(fmt.Sprintf(`{"alg":"HS256","kid":"k%d"}`, i)))
		if err != nil || h.Kid != fmt.Sprintf("k%d", i) {
			t.Fatalf("header %d: %+v, %v", i, h, err)
		}
	}
	if len(c.m) != maxCachedHeaders {
		t.Fatalf("cache holds %d headers, want at most %d", len(c.m), maxCachedHeaders)
	}
}
