package clientid

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"a", "req-1", "A.b_c:d-9", strings.Repeat("x", MaxLen)} {
		if err := Validate(ok); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", " ", "   ", "a b", strings.Repeat("x", MaxLen+1),
		strings.Repeat("é", 65), "{tag}", "a\x00b", "line\n", "ключ"} {
		if err := Validate(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func FuzzValidate(f *testing.F) {
	f.Add("req-1")
	f.Add(strings.Repeat("é", 65))
	f.Fuzz(func(t *testing.T, s string) {
		err := Validate(s)
		if err == nil && (len(s) == 0 || len(s) > MaxLen || strings.ContainsAny(s, " {}\x00\n")) {
			t.Fatalf("Validate(%q) accepted a forbidden identifier", s)
		}
	})
}
