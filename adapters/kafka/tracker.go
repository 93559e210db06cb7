package kafka

import (
	"fmt"
	"sync"
)

// offsetTracker tracks the records of one partition handed to the runner
// and which of them are finished (acknowledged, or copied to the retry or
// dead-letter topic). Its watermark is the offset to commit: the lowest
// unfinished offset, or one past the last tracked record when every
// tracked record is finished. Records finish in any order; the watermark
// only moves over a contiguous prefix of finished records. Safe for
// concurrent use; the zero value is not usable (newOffsetTracker).
type offsetTracker struct {
	mu       sync.Mutex
	started  bool
	last     int64          // highest offset added
	base     int64          // watermark
	pending  []int64        // offsets above the watermark, ascending
	finished map[int64]bool // every offset of pending: whether it is finished
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{finished: map[int64]bool{}} }

// add tracks offset off, which must be above every offset added before.
func (t *offsetTracker) add(off int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started && off <= t.last {
		return fmt.Errorf("offset %d added after %d", off, t.last)
	}
	if len(t.pending) == 0 {
		t.started, t.base = true, off
	}
	t.last = off
	t.pending = append(t.pending, off)
	t.finished[off] = false
	return nil
}

// done marks off finished; an offset not tracked (or finished already) is
// an error.
func (t *offsetTracker) done(off int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fin, ok := t.finished[off]; !ok || fin {
		return fmt.Errorf("offset %d is not pending", off)
	}
	t.finished[off] = true
	for len(t.pending) > 0 && t.finished[t.pending[0]] {
		delete(t.finished, t.pending[0])
		t.pending = t.pending[1:]
	}
	if len(t.pending) > 0 {
		t.base = t.pending[0]
	} else {
		t.base = t.last + 1
	}
	return nil
}

// watermark returns the offset to commit; false when nothing was tracked.
func (t *offsetTracker) watermark() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.base, t.started
}
