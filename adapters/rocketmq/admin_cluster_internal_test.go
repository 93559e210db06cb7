package rocketmq

import (
	"encoding/json"
	"testing"
)

// TestQuoteIntegerKeys: bare integer object keys (fastjson's maps with
// integer keys) are quoted; numbers as values or array elements, keys and
// values that are strings (with escapes, braces and digits inside) are
// left as they are; valid JSON comes back unchanged.
func TestQuoteIntegerKeys(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",1:"h:2"},"brokerName":"broker-a"}},"clusterAddrTable":{"C":["broker-a"]}}`,
			`{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"127.0.0.1:10911","1":"h:2"},"brokerName":"broker-a"}},"clusterAddrTable":{"C":["broker-a"]}}`},
		{`{ -12 : [1, 2, {3:4}], "a\"{5:": "x,6:", "n": 7 , 8:{}}`, `{ "-12" : [1, 2, {"3":4}], "a\"{5:": "x,6:", "n": 7 , "8":{}}`},
		{`{"a":[1,2],"b":{"0":"x"}}`, `{"a":[1,2],"b":{"0":"x"}}`},
		{``, ``},
	} {
		got := string(quoteIntegerKeys([]byte(c.in)))
		if got != c.want {
			t.Errorf("quoteIntegerKeys(%s)\n = %s\nwant %s", c.in, got, c.want)
		}
		if c.want != "" && !json.Valid([]byte(got)) {
			t.Errorf("quoteIntegerKeys(%s) is not JSON: %s", c.in, got)
		}
	}
}
