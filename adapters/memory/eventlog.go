package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// eventPage is how many records a subscription reads at a time.
const eventPage = 256

// EventLog is a test double of the sequenced event log: an in-memory
// ports.EventLog and ports.EventSubscriptions over a slice of records that
// the test appends (Append), for fast tests of what sits on the ports (the
// API's EventService). It keeps the contracts (positions strictly
// increasing and final, catch-up then live without gap or duplicate,
// filters, checkpoints, the FieldErrors of a bad request) but has no
// sequencer: an appended record is settled at once. It is no substitute
// for the tests of the PostgreSQL log. The idle checkpoint interval is
// wall-clock time (a subscription waits on a timer); it starts no
// goroutine: Subscribe runs on its caller's. Safe for concurrent use.
type EventLog struct {
	mu      sync.Mutex
	records []ports.EventRecord
	changed chan struct{} // closed and replaced by Append
	idle    time.Duration
}

// NewEventLog returns an empty log whose subscriptions send a checkpoint
// after idle without a new event (<= 0: one second).
func NewEventLog(idle time.Duration) *EventLog {
	if idle <= 0 {
		idle = time.Second
	}
	return &EventLog{changed: make(chan struct{}), idle: idle}
}

// Append is a test facility: it gives recs the positions after the head,
// in order (their Position fields are overwritten), wakes the waiting
// subscriptions and returns the new head.
func (l *EventLog) Append(recs ...ports.EventRecord) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	head := l.headLocked()
	for _, r := range recs {
		head++
		r.Position = head
		l.records = append(l.records, r)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return head
}

func (l *EventLog) headLocked() int64 {
	if len(l.records) == 0 {
		return 0
	}
	return l.records[len(l.records)-1].Position
}

// ReadEvents implements ports.EventLog.
func (l *EventLog) ReadEvents(ctx context.Context, after int64, f ports.EventFilter, limit int) ([]ports.EventRecord, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("read events: %w", err)
	}
	events, head, _ := l.read(after, f, limit)
	return events, head, nil
}

// read returns up to limit matching records after `after`, the head and
// the channel Append closes next.
func (l *EventLog) read(after int64, f ports.EventFilter, limit int) ([]ports.EventRecord, int64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Positions are 1, 2, ...: the record of position p is at index p-1.
	var out []ports.EventRecord
	for i := max(after, 0); i < int64(len(l.records)) && len(out) < limit; i++ {
		if r := l.records[i]; matches(r, f) {
			out = append(out, r)
		}
	}
	return out, l.headLocked(), l.changed
}

func matches(r ports.EventRecord, f ports.EventFilter) bool {
	if f.ActivityID != 0 && r.ActivityID != f.ActivityID {
		return false
	}
	return len(f.Types) == 0 || slices.Contains(f.Types, r.Event.Type)
}

// Subscribe implements ports.EventSubscriptions: it delivers the matching
// records after from, then waits for appended ones; when it has caught up
// and the head moved past the last position sent it sends a checkpoint of
// the head, and another after each idle period without an event.
func (l *EventLog) Subscribe(ctx context.Context, from int64, f ports.EventFilter, sink ports.EventSink) error {
	for _, t := range f.Types {
		switch t {
		case order.EventCreated, order.EventPaymentStarted, order.EventPaid, order.EventCanceled:
		default:
			return ports.InvalidField("event_types", "unknown event type %q", t)
		}
	}
	if from < 0 {
		return ports.InvalidField("from_position", "must be >= 0")
	}
	if _, head, _ := l.read(0, f, 0); from > head {
		return ports.InvalidField("from_position", "%d is beyond the log's head %d", from, head)
	}
	timer := time.NewTimer(l.idle)
	defer timer.Stop()
	last, live := from, false
	for ctx.Err() == nil {
		events, head, changed := l.read(last, f, eventPage)
		for _, e := range events {
			if err := sink.Event(ctx, e); err != nil {
				return fmt.Errorf("deliver position %d: %w", e.Position, err)
			}
			last = e.Position
		}
		if len(events) == eventPage {
			continue
		}
		if head > last || !live {
			live = true
			last = max(last, head)
			if err := sink.Checkpoint(ctx, ports.Checkpoint{Position: last, Live: true}); err != nil {
				return fmt.Errorf("checkpoint %d: %w", last, err)
			}
		}
		timer.Reset(l.idle)
		select {
		case <-ctx.Done():
		case <-changed:
		case <-timer.C:
			if err := sink.Checkpoint(ctx, ports.Checkpoint{Position: last, Live: true}); err != nil {
				return fmt.Errorf("checkpoint %d: %w", last, err)
			}
		}
	}
	return nil
}
