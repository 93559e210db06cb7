package redistest

import (
	"context"
	"strings"
	"testing"
)

func TestNamespaceIsUniqueAndPurged(t *testing.T) {
	c := Client(t)
	var ns1 string
	t.Run("Inner/Name With Spaces", func(t *testing.T) {
		ns1 = Namespace(t, c)
		if strings.ContainsAny(ns1, "{} /") || !strings.HasPrefix(ns1, "t-") {
			t.Fatalf("namespace %q is not key-safe", ns1)
		}
		if ns2 := Namespace(t, c); ns2 == ns1 {
			t.Fatalf("two namespaces of one test are equal: %q", ns1)
		}
		for _, k := range []string{ns1 + ":a", ns1 + ":{x}:b"} {
			if err := c.Set(context.Background(), k, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	keys, err := c.Keys(context.Background(), ns1+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("keys left after the subtest ended: %v", keys)
	}
}

func TestSanitize(t *testing.T) {
	if got := sanitize("TestX/Sub_case #2"); got != "testx-sub-case-2" {
		t.Fatalf("sanitize = %q", got)
	}
}
