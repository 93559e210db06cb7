package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
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
	// assigned by other instances are seen too.
	Poll time.Duration
	// CheckpointEvery is the longest an idle subscription goes without a
	// checkpoint (default 5 s).
	CheckpointEvery time.Duration
}

// EventSubscriptions implements ports.EventSubscriptions on the event log.
//
// Catch-up and live are one loop: read a page of events after the last
// position handled, deliver it, and when a read came back short (the
// subscription is at the head) wait for the sequencer's signal or the
// poll interval and read again from the same position. Positions are
// final (an event gets one only once nothing below it can still commit),
// so there is no switch to get wrong: no gap and no duplicate by
// construction.
type EventSubscriptions struct {
	log     ports.EventLog
	moved   func() <-chan struct{}
	metrics EventLogMetrics
	logger  *slog.Logger
	cfg     SubscriptionConfig
}

// NewEventSubscriptions wires the subscriptions. seq may be nil (no
// sequencer in this process: live subscriptions poll); m may be nil.
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
	never := make(chan struct{})
	moved := func() <-chan struct{} { return never }
	if seq != nil {
		moved = seq.Moved
	}
	return &EventSubscriptions{log: log, moved: moved, metrics: m, logger: logger.With("component", "event-subscriptions"), cfg: cfg}
}

var _ ports.EventSubscriptions = (*EventSubscriptions)(nil)

// knownEventTypes are the types a filter may name.
var knownEventTypes = []order.EventType{order.EventCreated, order.EventPaymentStarted, order.EventPaid, order.EventCanceled}

// Subscribe implements ports.EventSubscriptions. A checkpoint is sent
// when the subscription first reaches the head (the first with Live set;
// every later one has it too), when a read found no matching event but
// the head moved past the last position sent, and at least every
// CheckpointEvery while idle. The bound
// on a slow subscriber is the sink's: it returns
// ports.ErrSubscriberTooSlow (the API's send bound), which ends the
// subscription with that error; a sink error after ctx ended ends it with
// nil.
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
	// Take the signal channel before the first read, so that positions
	// assigned after that read wake the wait below.
	moved := s.moved()
	events, head, err := s.log.ReadEvents(ctx, from, f, s.cfg.Page)
	if err != nil {
		return s.endErr(ctx, fmt.Errorf("read the event log: %w", err))
	}
	if from > head {
		return ports.InvalidField("from_position", "%d is beyond the log's head %d", from, head)
	}
	s.logger.DebugContext(ctx, "event subscription started", "from_position", from, "head", head,
		"activity_id", f.ActivityID, "event_types", f.Types)
	if s.metrics != nil {
		s.metrics.SubscriptionStarted()
		defer s.metrics.SubscriptionEnded()
	}
	last, sent := from, from // last: every match up to it delivered; sent: last position told the sink
	lastSend := time.Now()
	live := false // set when the subscription first reached the head
	for {
		for _, e := range events {
			if err := sink.Event(ctx, e); err != nil {
				return s.endErr(ctx, err)
			}
			last, sent = e.Position, e.Position
		}
		if len(events) > 0 {
			lastSend = time.Now()
			if s.metrics != nil {
				s.metrics.Delivered(len(events))
			}
		}
		if len(events) < s.cfg.Page {
			// At the head: nothing matching f in (last, head] was left.
			last = max(last, head)
			if !live || (len(events) == 0 && last > sent) || time.Since(lastSend) >= s.cfg.CheckpointEvery {
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
			case <-moved:
			case <-wait.C:
			}
			wait.Stop()
			moved = s.moved()
		}
		events, head, err = s.log.ReadEvents(ctx, last, f, s.cfg.Page)
		if err != nil {
			return s.endErr(ctx, fmt.Errorf("read the event log after %d: %w", last, err))
		}
	}
}

// endErr is nil when ctx ended (the subscription is over), else err; a
// subscriber found too slow keeps its error.
func (s *EventSubscriptions) endErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ports.ErrSubscriberTooSlow) {
		return nil
	}
	return err
}
