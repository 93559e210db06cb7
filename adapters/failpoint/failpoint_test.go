package failpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	r, err := New("a=error; b=delay(20ms) ;c=exit")
	if err != nil {
		t.Fatal(err)
	}
	exited := 0
	r.exit = func(code int) {
		if code != 137 {
			t.Errorf("exit code %d", code)
		}
		exited++
	}
	ctx := context.Background()
	if err := r.Inject(ctx, "a"); !errors.Is(err, ErrInjected) {
		t.Fatalf("a: %v", err)
	}
	start := time.Now()
	if err := r.Inject(ctx, "b"); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("b: %v after %v", err, time.Since(start))
	}
	_ = r.Inject(ctx, "c")
	if exited != 1 {
		t.Fatal("exit action did not exit")
	}
	if err := r.Inject(ctx, "off"); err != nil {
		t.Fatalf("unset point: %v", err)
	}
	r.Clear("a")
	if err := r.Inject(ctx, "a"); err != nil {
		t.Fatalf("cleared point: %v", err)
	}
	if r.Hits("a") != 1 || r.Hits("b") != 1 {
		t.Fatalf("hits a=%d b=%d", r.Hits("a"), r.Hits("b"))
	}
	for _, bad := range []string{"x", "x=boom", "x=delay(soon)"} {
		if _, err := New(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestProbabilisticExit: exit(p) exits on about a share p of the hits and
// lets the others through; probabilities outside (0, 1] are refused.
func TestProbabilisticExit(t *testing.T) {
	r, err := New("c=exit(0.25)")
	if err != nil {
		t.Fatal(err)
	}
	exited := 0
	r.exit = func(int) { exited++ }
	const hits = 4000
	for range hits {
		_ = r.Inject(context.Background(), "c")
	}
	if exited < hits/8 || exited > hits*3/8 {
		t.Fatalf("exit(0.25) exited on %d of %d hits", exited, hits)
	}
	for _, bad := range []string{"x=exit(0)", "x=exit(1.5)", "x=exit(often)"} {
		if _, err := New(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
