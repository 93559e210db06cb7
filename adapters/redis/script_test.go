package redis

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
)

// scriptRecorder is a go-redis hook recording the EVAL-family commands a
// client sends.
type scriptRecorder struct {
	mu    sync.Mutex
	names []string
}

func (r *scriptRecorder) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *scriptRecorder) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if name := strings.ToLower(cmd.Name()); strings.HasPrefix(name, "eval") {
			r.mu.Lock()
			r.names = append(r.names, name)
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (r *scriptRecorder) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (r *scriptRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.names
	r.names = nil
	return out
}

// TestScriptsRunBySHAWithNoscriptFallback flushes the script cache and
// checks that a call tries EVALSHA, falls back to EVAL on NOSCRIPT, and that
// the next call runs by SHA again. Not parallel: the package's other tests
// must not load the script between the flush and the call.
func TestScriptsRunBySHAWithNoscriptFallback(t *testing.T) {
	c := redistest.Client(t)
	rec := &scriptRecorder{}
	c.AddHook(rec)
	ns := redistest.Namespace(t, c)
	s, err := New(c, Config{Namespace: ns}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, s: s, c: c}
	ctx := ctxT(t)
	f.seed(1, 1, 10)
	f.reserve(1, 1, 1, testBase, testBase) // the script is cached now
	rec.take()

	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if exists := c.ScriptExists(ctx, s.scripts.byName[scriptReserve].Hash()).Val(); exists[0] {
		t.Fatal("reserve script still cached after SCRIPT FLUSH")
	}
	f.reserve(1, 1, 2, testBase, testBase)
	if got := rec.take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
		t.Fatalf("after SCRIPT FLUSH the client sent %v, want [evalsha eval]", got)
	}
	f.reserve(1, 1, 3, testBase, testBase)
	if got := rec.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Fatalf("next call sent %v, want [evalsha]", got)
	}
	if inv := f.inventory(1, 1); inv.Available != 7 {
		t.Fatalf("inventory = %+v, want 7 available", inv)
	}

	// Preload loads every script.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	for name, sc := range s.scripts.byName {
		if exists := c.ScriptExists(ctx, sc.Hash()).Val(); !exists[0] {
			t.Fatalf("script %s not loaded by Preload", name)
		}
	}
}
