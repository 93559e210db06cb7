package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// FailpointAction is what an armed failpoint does when reached, in this
// order: wait Delay (real time, cut short by the context), call Hook, and
// return Err (or Hook's error). The zero action only counts the hit.
type FailpointAction struct {
	// Err is returned by Inject; the caller abandons its operation as if
	// the process had died there.
	Err error
	// Delay is slept before returning. A canceled context ends the sleep
	// and Inject returns the context's error.
	Delay time.Duration
	// Hook, when set, runs inside Inject (for example to let a test act
	// while the caller is stopped at the point). A non-nil result is
	// returned when Err is nil.
	Hook func(ctx context.Context) error
	// Times is how many hits the action applies to before the point turns
	// itself off; 0 means until cleared.
	Times int
}

// Failpoints is a ports.Failpoints for tests: points are armed and cleared
// by name, and every hit is counted. The "terminate the process" action of
// the real implementation is represented by Err (the caller abandons the
// operation). Safe for concurrent use.
type Failpoints struct {
	mu      sync.Mutex
	actions map[string]FailpointAction
	hits    map[string]int
}

var _ ports.Failpoints = (*Failpoints)(nil)

// NewFailpoints returns failpoints that are all off.
func NewFailpoints() *Failpoints {
	return &Failpoints{actions: map[string]FailpointAction{}, hits: map[string]int{}}
}

// Set arms the point name with a.
func (f *Failpoints) Set(name string, a FailpointAction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions[name] = a
}

// SetError arms name to return err on every hit until cleared.
func (f *Failpoints) SetError(name string, err error) { f.Set(name, FailpointAction{Err: err}) }

// SetDelay arms name to sleep d on every hit until cleared.
func (f *Failpoints) SetDelay(name string, d time.Duration) { f.Set(name, FailpointAction{Delay: d}) }

// Clear turns the point name off.
func (f *Failpoints) Clear(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.actions, name)
}

// ClearAll turns every point off. Hit counts are kept.
func (f *Failpoints) ClearAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.actions)
}

// Hits returns how often Inject was called for name, armed or not.
func (f *Failpoints) Hits(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[name]
}

// Inject implements ports.Failpoints: nil when name is off, otherwise the
// armed action's outcome. Injected errors are wrapped with the point's
// name.
func (f *Failpoints) Inject(ctx context.Context, name string) error {
	f.mu.Lock()
	f.hits[name]++
	a, ok := f.actions[name]
	if ok && a.Times > 0 {
		if a.Times == 1 {
			delete(f.actions, name)
		} else {
			next := a
			next.Times--
			f.actions[name] = next
		}
	}
	f.mu.Unlock()
	if !ok {
		return nil
	}
	if a.Delay > 0 {
		timer := time.NewTimer(a.Delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("failpoint %s: %w", name, ctx.Err())
		case <-timer.C:
		}
	}
	var err error
	if a.Hook != nil {
		err = a.Hook(ctx)
	}
	if a.Err != nil {
		err = a.Err
	}
	if err != nil {
		return fmt.Errorf("failpoint %s: %w", name, err)
	}
	return nil
}
