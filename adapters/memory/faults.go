package memory

import (
	"fmt"
	"slices"
	"sync"
)

// Fault is an error injected into a method of Redis (a test facility). Injected errors are returned wrapped with the method's name,
// so tests inject for example fmt.Errorf("%w: boom", ports.ErrTransient)
// and the code under test matches it with errors.Is.
type Fault struct {
	// Err is the error the method returns.
	Err error
	// AfterEffect makes the method take effect first and then return Err:
	// a lost reply, after which the caller cannot know that it succeeded.
	// Without it the method fails before changing anything.
	AfterEffect bool
	// Times is how many calls the fault applies to; 0 means until cleared.
	Times int
}

// faults holds the armed faults of one adapter, by method name.
type faults struct {
	mu      sync.Mutex
	known   []string
	armed   map[string]Fault
	adapter string
}

func newFaults(adapter string, known ...string) *faults {
	return &faults{adapter: adapter, known: known, armed: map[string]Fault{}}
}

// set arms method with f. An unknown method name is a bug in the test and
// panics, so that a typo cannot silently disable a fault.
func (fs *faults) set(method string, f Fault) {
	if !slices.Contains(fs.known, method) {
		panic(fmt.Sprintf("memory %s: no method %q to inject a fault into (known: %v)", fs.adapter, method, fs.known))
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.Err == nil {
		delete(fs.armed, method)
		return
	}
	fs.armed[method] = f
}

func (fs *faults) clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	clear(fs.armed)
}

// hit consumes one application of method's fault and returns the error to
// return before taking effect or the one to return after it (at most one
// of them is non-nil).
func (fs *faults) hit(method string) (before, after error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.armed[method]
	if !ok {
		return nil, nil
	}
	switch {
	case f.Times == 1:
		delete(fs.armed, method)
	case f.Times > 1:
		f.Times--
		fs.armed[method] = f
	}
	err := fmt.Errorf("memory %s %s (injected fault): %w", fs.adapter, method, f.Err)
	if f.AfterEffect {
		return nil, err
	}
	return err, nil
}
