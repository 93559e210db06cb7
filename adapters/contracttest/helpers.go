package contracttest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// uniq returns a random 16-character hex string for ids.
func uniq() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomID returns a random positive entity id below 2^40.
func randomID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:])>>24) + 1
}

// suiteClock is the settable clock a suite hands to an adapter through its
// factory. Safe for concurrent use.
type suiteClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *suiteClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *suiteClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// baseTime is the fixed start of every suite's timeline: millisecond
// aligned, so adapters storing milliseconds or microseconds read it back
// unchanged.
var baseTime = time.Date(2030, time.January, 1, 8, 0, 0, 0, time.UTC)

// wantErr fails the test unless err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one matching %v", what, err, target)
	}
}

// noErr fails the test on err.
func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sameSet reports whether a and b hold the same strings, ignoring order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// parallel runs fn(i) for i in [0, n) on n goroutines, started together,
// and waits for all of them.
func parallel(n int, fn func(i int)) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// RunLoop runs loop (a broker adapter's consumer loop, say) in a goroutine
// of its own until stop or the end of the test. stop cancels loop's
// context and waits up to wait for it to return, reporting its error or
// its not returning as an error of t; it is idempotent.
func RunLoop(t *testing.T, wait time.Duration, loop func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run loop: %v", err)
				}
			case <-time.After(wait):
				t.Errorf("run loop did not return %s after cancel", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
