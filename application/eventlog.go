package application

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// EventLogMetrics receives the event log's measurements:
// event_log_head_position, event_log_sequenced_total,
// event_subscriptions_active and event_subscription_delivered_total. A
// nil EventLogMetrics records nothing.
type EventLogMetrics interface {
	// Head reports the highest position the log has assigned.
	Head(position int64)
	// Sequenced counts events given a position by this instance.
	Sequenced(n int)
	// SubscriptionStarted and SubscriptionEnded track the open
	// subscriptions.
	SubscriptionStarted()
	SubscriptionEnded()
	// Delivered counts events handed to subscribers.
	Delivered(n int)
}

// SequencerConfig tunes the Sequencer.
type SequencerConfig struct {
	// Batch is how many events one Sequence call takes (default 500).
	Batch int
	// Interval is the pause after a batch that was not full (default
	// 20 ms): the bound on how long a settled event waits for its
	// position.
	Interval time.Duration
	// BackoffBase and BackoffMax bound the retries after a failed call
	// (defaults 100 ms and 5 s).
	BackoffBase, BackoffMax time.Duration
}

// Sequencer is the worker that gives positions to settled events
// (ports.EventSequencer) and tells this process's subscriptions when the
// log's head moved. Run it on one or more instances: the sequencers of all
// instances are serialised by the store, so positions never interleave.
type Sequencer struct {
	seq     ports.EventSequencer
	log     ports.EventLog
	metrics EventLogMetrics
	logger  *slog.Logger
	cfg     SequencerConfig

	mu    sync.Mutex
	moved chan struct{} // closed (and replaced) when the head moved
}

// NewSequencer wires the sequencer; m may be nil.
func NewSequencer(seq ports.EventSequencer, log ports.EventLog, m EventLogMetrics, logger *slog.Logger, cfg SequencerConfig) *Sequencer {
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 100 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		cfg.BackoffMax = max(5*time.Second, cfg.BackoffBase)
	}
	return &Sequencer{seq: seq, log: log, metrics: m, logger: logger.With("component", "sequencer"), cfg: cfg,
		moved: make(chan struct{})}
}

// Moved returns a channel that is closed the next time this process's
// sequencer assigns positions. Take a new channel after each wake-up (one
// broadcast for every waiter: no goroutine per subscriber).
func (s *Sequencer) Moved() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.moved
}

func (s *Sequencer) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.moved)
	s.moved = make(chan struct{})
}

// Run sequences until ctx ends (then nil): again at once after a full
// batch, else after Interval; a failed call is logged and retried with
// exponential backoff.
func (s *Sequencer) Run(ctx context.Context) error {
	failures := 0
	s.reportHead(ctx)
	for ctx.Err() == nil {
		n, err := s.SequenceOnce(ctx)
		wait := s.cfg.Interval
		switch {
		case err != nil && ctx.Err() != nil: // canceled mid-call: the loop ends
			wait = 0
		case err != nil:
			failures++
			wait = Backoff(s.cfg.BackoffBase, s.cfg.BackoffMax, failures)
			s.logger.WarnContext(ctx, "sequence events failed", "error", err, "attempt", failures, "retry_in", wait)
		case n >= s.cfg.Batch:
			failures, wait = 0, 0
		default:
			failures = 0
		}
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// SequenceOnce sequences one batch and returns how many events got a
// position; when some did, it wakes the subscriptions and reports the
// head.
func (s *Sequencer) SequenceOnce(ctx context.Context) (int, error) {
	n, err := s.seq.Sequence(ctx, s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("sequence events: %w", err)
	}
	if n > 0 {
		if s.metrics != nil {
			s.metrics.Sequenced(n)
		}
		s.broadcast()
		s.reportHead(ctx)
	}
	return n, nil
}

// reportHead sets the head gauge (a read after the last position returns
// no event, only the head: one index probe).
func (s *Sequencer) reportHead(ctx context.Context) {
	if s.metrics == nil {
		return
	}
	if _, head, err := s.log.ReadEvents(ctx, math.MaxInt64, ports.EventFilter{}, 1); err == nil {
		s.metrics.Head(head)
	}
}

// SubscriptionConfig tunes EventSubscriptions.
type SubscriptionConfig struct {
	// Page is how many events one read takes (default 1000).
	Page int
	// Poll is how often a live subscription reads when this process's
	// sequencer gave no signal (default 200 ms), so that positions
	// assigned by other instances are seen too. With the tail reader
	// running it is the tail reader that polls; the live subscriptions
	// read its window.
	Poll time.Duration
	// CheckpointEvery is the longest an idle subscription goes without a
	// checkpoint (default 5 s).
	CheckpointEvery time.Duration
	// Window is how many of the log's most recent events the tail reader
	// (Run) keeps in memory for the live subscriptions (default 10,000);
	// negative: no window, every subscription reads the store itself.
	Window int
}

// DefaultEventWindow is SubscriptionConfig.Window's default.
const DefaultEventWindow = 10_000

// EventSubscriptions implements ports.EventSubscriptions on the event log.
//
// Catch-up and live are one loop: read a page of events after the last
// position handled, deliver it, and when a read came back short (the
// subscription is at the head) wait for a signal or the poll interval and
// read again from the same position. Positions are final (an event gets
// one only once nothing below it can still commit), so there is no switch
// to get wrong: no gap and no duplicate by construction.
//
// Reads are served from one of two places. The tail reader (Run, one
// worker per EventSubscriptions) keeps a window of the log's most recent
// events in memory, read once per sequencer move or poll for every
// subscription; a subscription whose last position is inside the window
// reads it there (its filter applied in memory) with the contract of
// ports.EventLog.ReadEvents, and waits on the tail reader's broadcast. A
// subscription below the window (catch-up, or a slow one the window left
// behind) reads the store, with one read of the next page in flight while
// a full page is delivered, until it reaches the window. Without a running
// tail reader (Run not called, ended, or its last read failed) every read
// goes to the store, as does each subscription's first read (it checks
// from against the log's real head).
type EventSubscriptions struct {
	log     ports.EventLog
	moved   func() <-chan struct{}
	metrics EventLogMetrics
	logger  *slog.Logger
	cfg     SubscriptionConfig
	tail    *tailWindow // nil: Window < 0
}

// NewEventSubscriptions wires the subscriptions. seq may be nil (no
// sequencer in this process: live subscriptions, or the tail reader,
// poll); m may be nil.
func NewEventSubscriptions(log ports.EventLog, seq *Sequencer, m EventLogMetrics, logger *slog.Logger, cfg SubscriptionConfig) *EventSubscriptions {
	if cfg.Page <= 0 {
		cfg.Page = 1000
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = 5 * time.Second
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultEventWindow
	}
	never := make(chan struct{})
	moved := func() <-chan struct{} { return never }
	if seq != nil {
		moved = seq.Moved
	}
	s := &EventSubscriptions{log: log, moved: moved, metrics: m, logger: logger.With("component", "event-subscriptions"), cfg: cfg}
	if cfg.Window > 0 {
		s.tail = &tailWindow{moved: make(chan struct{})}
	}
	return s
}

var _ ports.EventSubscriptions = (*EventSubscriptions)(nil)

// knownEventTypes are the types a filter may name.
var knownEventTypes = []order.EventType{order.EventCreated, order.EventPaymentStarted, order.EventPaid, order.EventCanceled}

// tailWindow is the tail reader's in-memory window: every event of the
// log in (after, head], in position order. Only Run writes it. A slice of
// events taken under mu stays valid after mu is released: elements are
// never changed once appended (eviction reslices, append writes only past
// every length handed out).
type tailWindow struct {
	running atomic.Bool // Run is in progress (one at a time)

	mu     sync.RWMutex
	active bool // the window follows the log: Run is reading and its last read succeeded
	after  int64
	head   int64
	events []ports.EventRecord
	moved  chan struct{} // closed (and replaced) when the window moved or stopped following
}

// broadcastLocked wakes every subscription waiting on the window; mu is
// held for writing.
func (t *tailWindow) broadcastLocked() {
	close(t.moved)
	t.moved = make(chan struct{})
}

// setActive marks the window as following the log or not, waking the
// waiters when that changes.
func (t *tailWindow) setActive(active bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active != active {
		t.active = active
		t.broadcastLocked()
	}
}

// Run is the tail reader: it keeps the window of the log's most recent
// events (SubscriptionConfig.Window) for the live subscriptions, reading
// the log once (unfiltered, after the window's head, page after page up to
// the head) each time this process's sequencer moves or Poll passes, and
// wakes the subscriptions waiting on it with one broadcast. It starts with
// the Window events below the head. A failed read is logged and retried
// with backoff; meanwhile the subscriptions read the store themselves. Run
// returns nil when ctx ends (the subscriptions fall back to the store), at
// once with nil when the window is off (Window < 0), and an error when
// another Run of the same EventSubscriptions is in progress.
func (s *EventSubscriptions) Run(ctx context.Context) error {
	t := s.tail
	if t == nil {
		return nil
	}
	if !t.running.CompareAndSwap(false, true) {
		return errors.New("event subscriptions: the tail reader is already running")
	}
	defer t.running.Store(false)
	defer t.setActive(false)
	started, failures := false, 0
	for ctx.Err() == nil {
		moved := s.moved()
		err := s.follow(ctx, &started)
		wait := s.cfg.Poll
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			t.setActive(false)
			failures++
			wait = Backoff(100*time.Millisecond, 5*time.Second, failures)
			s.logger.WarnContext(ctx, "event tail reader: read failed", "error", err, "attempt", failures, "retry_in", wait)
			moved = nil // wait out the backoff
		default:
			failures = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-moved:
		case <-timer.C:
		}
		timer.Stop()
	}
	return nil
}

// follow reads the log after the window's head until a read comes back
// short, appending to the window (and evicting its oldest events beyond
// Window) and waking the waiters after each read that moved it. The first
// call places the window Window positions below the head.
func (s *EventSubscriptions) follow(ctx context.Context, started *bool) error {
	t := s.tail
	if !*started {
		_, head, err := s.log.ReadEvents(ctx, math.MaxInt64, ports.EventFilter{}, 1)
		if err != nil {
			return fmt.Errorf("read the event log's head: %w", err)
		}
		t.mu.Lock()
		t.after = max(0, head-int64(s.cfg.Window))
		t.head, t.events = t.after, nil
		t.mu.Unlock()
		*started = true
	}
	for {
		after := t.head // written only by this goroutine
		events, head, err := s.log.ReadEvents(ctx, after, ports.EventFilter{}, s.cfg.Page)
		if err != nil {
			return fmt.Errorf("read the event log after %d: %w", after, err)
		}
		full := len(events) >= s.cfg.Page
		if full {
			// Only the page's events are known: the window ends at
			// the last of them, not at the head.
			head = events[len(events)-1].Position
		}
		t.mu.Lock()
		moved := head > t.head || !t.active
		t.events = append(t.events, events...)
		t.head = max(t.head, head)
		if drop := len(t.events) - s.cfg.Window; drop > 0 {
			t.after = t.events[drop-1].Position
			t.events = t.events[drop:]
		}
		t.active = true
		if moved {
			t.broadcastLocked()
		}
		t.mu.Unlock()
		if !full {
			return nil
		}
	}
}

// matches reports whether r is selected by f.
func matches(f ports.EventFilter, r *ports.EventRecord) bool {
	return (f.ActivityID == 0 || r.ActivityID == f.ActivityID) &&
		(len(f.Types) == 0 || slices.Contains(f.Types, r.Event.Type))
}

// page is the result of one read: the events, the head they were read
// with, the limit of the read (a page of limit events is full: the head
// may be further), the channel that wakes a subscription waiting after
// this read, and whether the store was read.
type page struct {
	events []ports.EventRecord
	head   int64
	limit  int
	wake   <-chan struct{}
	store  bool
	err    error
}

// read reads up to limit events after last matching f, from the window
// when it follows the log, holds last and has reached seen (the highest
// head the subscription was told: a window behind it would move the
// subscription's head back), else from the store. Its contract is
// ports.EventLog.ReadEvents'.
func (s *EventSubscriptions) read(ctx context.Context, last, seen int64, f ports.EventFilter, limit int) page {
	if t := s.tail; t != nil {
		t.mu.RLock()
		if t.active && t.after <= last && last <= t.head && t.head >= seen {
			events, head := t.events, t.head
			wake := t.moved
			t.mu.RUnlock()
			return page{events: window(events, last, f, limit), head: head, limit: limit, wake: wake}
		}
		var wake <-chan struct{}
		if t.active {
			wake = t.moved
		}
		t.mu.RUnlock()
		if wake != nil {
			return s.readStore(ctx, last, f, wake, limit)
		}
	}
	// Take the signal channel before the read, so that positions assigned
	// after it wake the wait that follows a short page.
	return s.readStore(ctx, last, f, s.moved(), limit)
}

func (s *EventSubscriptions) readStore(ctx context.Context, last int64, f ports.EventFilter, wake <-chan struct{}, limit int) page {
	events, head, err := s.log.ReadEvents(ctx, last, f, limit)
	return page{events: events, head: head, limit: limit, wake: wake, store: true, err: err}
}

// window returns up to limit events of events (a window's, in position
// order) after last matching f. Without a filter it is a sub-slice of
// events (no copy; its capacity ends at its length).
func window(events []ports.EventRecord, last int64, f ports.EventFilter, limit int) []ports.EventRecord {
	i, _ := slices.BinarySearchFunc(events, last, func(r ports.EventRecord, p int64) int { return cmp.Compare(r.Position, p+1) })
	if f.ActivityID == 0 && len(f.Types) == 0 {
		j := min(len(events), i+limit)
		return events[i:j:j]
	}
	var out []ports.EventRecord
	for k := i; k < len(events) && len(out) < limit; k++ {
		if matches(f, &events[k]) {
			out = append(out, events[k])
		}
	}
	return out
}

// catchUpPages bounds a catch-up read (below the window, after a full
// page) to that many pages: fewer statements for a long catch-up, a
// bounded buffer (two reads of it at most: the one delivered and the one
// in flight).
const catchUpPages = 4

// prefetch is the one read a subscription may have in flight: the next
// page, read while the current one is delivered.
type prefetch struct {
	cancel context.CancelFunc
	done   chan page
}

// start reads the page after last in a goroutine owned by the prefetch
// (stop or take ends it).
func (p *prefetch) start(ctx context.Context, s *EventSubscriptions, last, seen int64, f ports.EventFilter, limit int) {
	pctx, cancel := context.WithCancel(ctx)
	p.cancel, p.done = cancel, make(chan page, 1)
	done := p.done
	go func() { done <- s.read(pctx, last, seen, f, limit) }()
}

// take waits for the read in flight and returns it.
func (p *prefetch) take() page {
	r := <-p.done
	p.cancel()
	p.done = nil
	return r
}

// stop cancels the read in flight, if any, and waits for it.
func (p *prefetch) stop() {
	if p.done != nil {
		p.cancel()
		<-p.done
		p.done = nil
	}
}

// Subscribe implements ports.EventSubscriptions. A checkpoint is sent
// when the subscription first reaches the head (the first with Live set;
// every later one has it too), when a read found no matching event but
// the head moved past the last position sent, and at least every
// CheckpointEvery while idle. The bound on a slow subscriber is the
// sink's: it returns ports.ErrSubscriberTooSlow (the API's send bound),
// which ends the subscription with that error; a sink error after ctx
// ended ends it with nil. A sink that implements ports.EventBatchSink gets each
// page in one call.
func (s *EventSubscriptions) Subscribe(ctx context.Context, from int64, f ports.EventFilter, sink ports.EventSink) error {
	if from < 0 {
		return ports.InvalidField("from_position", "must be >= 0 (0: the beginning of the log), got %d", from)
	}
	for _, t := range f.Types {
		if !slices.Contains(knownEventTypes, t) {
			return ports.InvalidField("event_types", "unknown event type %q (known: %v)", t, knownEventTypes)
		}
	}
	if f.ActivityID < 0 {
		return ports.InvalidField("activity_id", "must be >= 0 (0: every activity), got %d", f.ActivityID)
	}
	// The first read is the store's: from is checked against the log's
	// real head (a window may lag it by one move).
	var wake <-chan struct{}
	if t := s.tail; t != nil {
		t.mu.RLock()
		if t.active {
			wake = t.moved
		}
		t.mu.RUnlock()
	}
	if wake == nil {
		wake = s.moved()
	}
	p := s.readStore(ctx, from, f, wake, s.cfg.Page)
	if p.err != nil {
		return s.endErr(ctx, fmt.Errorf("read the event log: %w", p.err))
	}
	if from > p.head {
		return ports.InvalidField("from_position", "%d is beyond the log's head %d", from, p.head)
	}
	s.logger.DebugContext(ctx, "event subscription started", "from_position", from, "head", p.head,
		"activity_id", f.ActivityID, "event_types", f.Types)
	if s.metrics != nil {
		s.metrics.SubscriptionStarted()
		defer s.metrics.SubscriptionEnded()
	}
	var next prefetch
	defer next.stop()
	batch, _ := sink.(ports.EventBatchSink)
	last, sent := from, from // last: every match up to it delivered; sent: last position told the sink
	seen := p.head           // the highest head read: the window serves only once it has reached it
	lastSend := time.Now()
	live := false // set when the subscription first reached the head
	for {
		full := len(p.events) >= p.limit
		limit := s.cfg.Page
		if full && p.store {
			// Catch-up: the next page, up to twice as large (at most
			// catchUpPages pages), is read while this one is delivered.
			limit = min(2*p.limit, catchUpPages*s.cfg.Page)
			next.start(ctx, s, p.events[len(p.events)-1].Position, seen, f, limit)
		}
		if err := deliver(ctx, sink, batch, p.events); err != nil {
			return s.endErr(ctx, err)
		}
		if len(p.events) > 0 {
			last, sent = p.events[len(p.events)-1].Position, p.events[len(p.events)-1].Position
			lastSend = time.Now()
			if s.metrics != nil {
				s.metrics.Delivered(len(p.events))
			}
		}
		if !full {
			// At the head: nothing matching f in (last, head] was left.
			last = max(last, p.head)
			if !live || (len(p.events) == 0 && last > sent) || time.Since(lastSend) >= s.cfg.CheckpointEvery {
				live = true
				if err := sink.Checkpoint(ctx, ports.Checkpoint{Position: last, Live: true}); err != nil {
					return s.endErr(ctx, err)
				}
				sent, lastSend = last, time.Now()
			}
			wait := time.NewTimer(s.cfg.Poll)
			select {
			case <-ctx.Done():
				wait.Stop()
				return nil
			case <-p.wake:
			case <-wait.C:
			}
			wait.Stop()
		}
		if next.done != nil {
			p = next.take()
		} else {
			p = s.read(ctx, last, seen, f, limit)
		}
		if p.err != nil {
			return s.endErr(ctx, fmt.Errorf("read the event log after %d: %w", last, p.err))
		}
		seen = max(seen, p.head)
	}
}

// deliver hands events to the sink: in one call to a batch sink, else
// one by one.
func deliver(ctx context.Context, sink ports.EventSink, batch ports.EventBatchSink, events []ports.EventRecord) error {
	if len(events) == 0 {
		return nil
	}
	if batch != nil {
		return batch.Events(ctx, events)
	}
	for _, e := range events {
		if err := sink.Event(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// endErr is nil when ctx ended (the subscription is over), else err; a
// subscriber found too slow keeps its error.
func (s *EventSubscriptions) endErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ports.ErrSubscriberTooSlow) {
		return nil
	}
	return err
}
