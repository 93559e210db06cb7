// Package failpoint implements ports.Failpoints: named fault-injection
// points configured from a spec string such as
// "placeorder.after_reserve=error;relay.after_publish=delay(200ms)".
//
// Actions: error (the operation is abandoned as if the process had died
// at that point), delay(<duration>) (sleep, then continue), exit (the
// process exits with status 137, like a SIGKILL, for crash tests that run
// the binary), exit(<p>) (the same with probability p per hit, 0 < p <= 1,
// for crashes at random points of a long run). Points can be changed at run time (Set, Clear), which
// in-process tests use. When no point is configured, bootstrap wires a nil
// ports.Failpoints, so disabled failpoints cost nothing.
package failpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrInjected is returned by points whose action is error.
var ErrInjected = errors.New("failpoint: injected failure")

// Action is what a point does when hit.
type Action struct {
	kind  string // error, delay, exit
	delay time.Duration
	p     float64 // exit probability; 1 for a plain exit
}

// Registry holds the configured points. Safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	points map[string]Action
	hits   map[string]int
	exit   func(code int)
}

// New returns a registry configured from spec (may be empty).
func New(spec string) (*Registry, error) {
	r := &Registry{points: map[string]Action{}, hits: map[string]int{}, exit: os.Exit}
	for _, item := range strings.Split(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want name=action", item)
		}
		if err := r.Set(strings.TrimSpace(name), strings.TrimSpace(action)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Set configures a point; action is error, exit, exit(<p>) or
// delay(<duration>).
func (r *Registry) Set(name, action string) error {
	a := Action{p: 1}
	switch {
	case action == "error", action == "exit":
		a.kind = action
	case strings.HasPrefix(action, "exit(") && strings.HasSuffix(action, ")"):
		p, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(action, "exit("), ")"), 64)
		if err != nil || p <= 0 || p > 1 {
			return fmt.Errorf("failpoint %s: exit probability %q must be in (0, 1]", name, action)
		}
		a.kind, a.p = "exit", p
	case strings.HasPrefix(action, "delay(") && strings.HasSuffix(action, ")"):
		d, err := time.ParseDuration(strings.TrimSuffix(strings.TrimPrefix(action, "delay("), ")"))
		if err != nil {
			return fmt.Errorf("failpoint %s: %w", name, err)
		}
		a.kind, a.delay = "delay", d
	default:
		return fmt.Errorf("failpoint %s: unknown action %q (error, exit, exit(p), delay(d))", name, action)
	}
	r.mu.Lock()
	r.points[name] = a
	r.mu.Unlock()
	return nil
}

// Clear disables a point.
func (r *Registry) Clear(name string) {
	r.mu.Lock()
	delete(r.points, name)
	r.mu.Unlock()
}

// Hits returns how often a point fired.
func (r *Registry) Hits(name string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.hits[name]
}

// Inject implements ports.Failpoints.
func (r *Registry) Inject(ctx context.Context, name string) error {
	r.mu.Lock()
	a, ok := r.points[name]
	if ok {
		r.hits[name]++
	}
	r.mu.Unlock()
	if !ok {
		return nil
	}
	switch a.kind {
	case "delay":
		select {
		case <-time.After(a.delay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "exit":
		if a.p < 1 && rand.Float64() >= a.p {
			return nil // this hit survives
		}
		r.exit(137)
	}
	return fmt.Errorf("%s: %w", name, ErrInjected)
}
