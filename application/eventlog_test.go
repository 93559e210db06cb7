package application_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// fakeLog is a tiny ports.EventLog and ports.EventSequencer: Add queues
// events as written but not yet settled; Sequence gives them positions.
type fakeLog struct {
	mu      sync.Mutex
	pending []ports.EventRecord
	log     []ports.EventRecord
}

func (l *fakeLog) Add(activityID int64, typ order.EventType, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		id := len(l.pending) + len(l.log) + 1
		l.pending = append(l.pending, ports.EventRecord{ActivityID: activityID,
			Event: order.Event{OrderID: fmt.Sprintf("ord_%d", id), Version: 1, Type: typ}})
	}
}

func (l *fakeLog) Sequence(_ context.Context, limit int) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(limit, len(l.pending))
	for _, r := range l.pending[:n] {
		r.Position = int64(len(l.log) + 1)
		l.log = append(l.log, r)
	}
	l.pending = l.pending[n:]
	return n, nil
}

func (l *fakeLog) ReadEvents(_ context.Context, after int64, f ports.EventFilter, limit int) ([]ports.EventRecord, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ports.EventRecord
	for _, r := range l.log {
		if r.Position <= after || (f.ActivityID != 0 && r.ActivityID != f.ActivityID) ||
			(len(f.Types) > 0 && !slices.Contains(f.Types, r.Event.Type)) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, r)
	}
	return out, int64(len(l.log)), nil
}

// item is what a sink received: an event's position or a checkpoint's.
type item struct {
	checkpoint bool
	position   int64
	live       bool
}

// chanSink forwards to a channel; fail, when set, is returned by Event.
type chanSink struct {
	ch   chan item
	fail error
}

func (s *chanSink) Event(ctx context.Context, e ports.EventRecord) error {
	if s.fail != nil {
		return s.fail
	}
	select {
	case s.ch <- item{position: e.Position}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *chanSink) Checkpoint(ctx context.Context, c ports.Checkpoint) error {
	select {
	case s.ch <- item{checkpoint: true, position: c.Position, live: c.Live}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// subscription runs Subscribe in a goroutine owned by the test (ended and
// awaited at cleanup) and returns the sink's channel and the result.
func subscription(t *testing.T, subs *application.EventSubscriptions, from int64, f ports.EventFilter) (<-chan item, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sink := &chanSink{ch: make(chan item, 64)}
	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { done <- subs.Subscribe(ctx, from, f, sink) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return sink.ch, done
}

// next returns the next item, bounded.
func next(t *testing.T, ch <-chan item) item {
	t.Helper()
	select {
	case it := <-ch:
		return it
	case <-time.After(20 * time.Second):
		t.Fatal("no item from the subscription")
		return item{}
	}
}

// nextEvent skips checkpoints and returns the next event's position.
func nextEvent(t *testing.T, ch <-chan item) int64 {
	t.Helper()
	for range 1000 {
		if it := next(t, ch); !it.checkpoint {
			return it.position
		}
	}
	t.Fatal("only checkpoints")
	return 0
}

// runSequencer runs seq until the test ends.
func runSequencer(t *testing.T, seq *application.Sequencer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = seq.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A subscription from 0 reads the log in pages (catch-up), then follows
// the events the sequencer assigns (live, woken by its signal: the poll is
// an hour): every position exactly once, in order, across the switch.
func TestSubscribeCatchUpThenLiveWithoutGapOrDuplicate(t *testing.T) {
	t.Parallel()
	l := &fakeLog{}
	l.Add(1, order.EventCreated, 2500)
	seq := application.NewSequencer(l, l, nil, discard(), application.SequencerConfig{Batch: 500, Interval: time.Millisecond})
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 500 sequenced before the subscription; the sequencer does the rest
	// while it catches up, then more arrive live.
	subs := application.NewEventSubscriptions(l, seq, nil, discard(), application.SubscriptionConfig{Page: 100, Poll: time.Hour})
	ch, _ := subscription(t, subs, 0, ports.EventFilter{})
	runSequencer(t, seq)
	for want := int64(1); want <= 2500; want++ {
		if got := nextEvent(t, ch); got != want {
			t.Fatalf("event at position %d, want %d", got, want)
		}
	}
	l.Add(1, order.EventPaid, 30)
	for want := int64(2501); want <= 2530; want++ {
		if got := nextEvent(t, ch); got != want {
			t.Fatalf("live event at position %d, want %d", got, want)
		}
	}
	// A subscription started mid-log gets exactly what follows its from.
	ch2, _ := subscription(t, subs, 2520, ports.EventFilter{})
	for want := int64(2521); want <= 2530; want++ {
		if got := nextEvent(t, ch2); got != want {
			t.Fatalf("from 2520: position %d, want %d", got, want)
		}
	}
}

// A filtered subscription whose filter matches nothing new gets a
// checkpoint at the head when the head moves, and idle checkpoints
// repeat; events that match still come in order.
func TestSubscribeCheckpoints(t *testing.T) {
	t.Parallel()
	l := &fakeLog{}
	l.Add(1, order.EventCreated, 3)
	l.Add(2, order.EventCreated, 1)
	seq := application.NewSequencer(l, l, nil, discard(), application.SequencerConfig{Interval: time.Millisecond})
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	subs := application.NewEventSubscriptions(l, seq, nil, discard(),
		application.SubscriptionConfig{Poll: 10 * time.Millisecond, CheckpointEvery: 50 * time.Millisecond})
	ch, _ := subscription(t, subs, 0, ports.EventFilter{ActivityID: 2})
	if it := next(t, ch); it != (item{position: 4}) {
		t.Fatalf("first item %+v, want the event at 4", it)
	}
	// At the head after its event: the live checkpoint at 4 comes at
	// once (catch-up is over; no event of activity 2 was skipped).
	if it := next(t, ch); it != (item{checkpoint: true, position: 4, live: true}) {
		t.Fatalf("item %+v, want the live checkpoint at 4", it)
	}
	l.Add(1, order.EventPaid, 5) // positions 5..9, none of activity 2
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	var last item
	for range 100 {
		if last = next(t, ch); last.position == 9 {
			break
		}
		if !last.checkpoint || last.position != 4 {
			t.Fatalf("item %+v before the checkpoint at 9", last)
		}
	}
	if last != (item{checkpoint: true, position: 9, live: true}) {
		t.Fatalf("item %+v, want a checkpoint at the new head 9", last)
	}
	if it := next(t, ch); it != (item{checkpoint: true, position: 9, live: true}) {
		t.Fatalf("item %+v, want the idle checkpoint repeated at 9", it)
	}
	l.Add(2, order.EventCanceled, 1)
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := nextEvent(t, ch); got != 10 {
		t.Fatalf("event at %d, want 10", got)
	}
	// A type filter: only the canceled event.
	ch2, _ := subscription(t, subs, 0, ports.EventFilter{Types: []order.EventType{order.EventCanceled}})
	if it := next(t, ch2); it != (item{position: 10}) {
		t.Fatalf("type filter: %+v, want the event at 10", it)
	}
}

// Bad requests are FieldErrors naming the field; a failing sink ends the
// subscription with its error; a slow-subscriber error keeps its sentinel;
// the end of ctx ends it with nil.
func TestSubscribeErrors(t *testing.T) {
	t.Parallel()
	l := &fakeLog{}
	l.Add(1, order.EventCreated, 3)
	seq := application.NewSequencer(l, l, nil, discard(), application.SequencerConfig{})
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	subs := application.NewEventSubscriptions(l, seq, nil, discard(), application.SubscriptionConfig{Poll: 5 * time.Millisecond})
	sink := &chanSink{ch: make(chan item, 64)}
	ctx := context.Background()
	for _, c := range []struct {
		from  int64
		f     ports.EventFilter
		field string
	}{
		{-1, ports.EventFilter{}, "from_position"},
		{4, ports.EventFilter{}, "from_position"},
		{0, ports.EventFilter{Types: []order.EventType{order.EventPaid, "ORDER_SHIPPED"}}, "event_types"},
		{0, ports.EventFilter{ActivityID: -2}, "activity_id"},
	} {
		var fe *ports.FieldError
		if err := subs.Subscribe(ctx, c.from, c.f, sink); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Subscribe(%d, %+v) = %v, want a FieldError on %s", c.from, c.f, err, c.field)
		}
	}
	if len(sink.ch) != 0 {
		t.Fatalf("a refused subscription delivered %d items", len(sink.ch))
	}
	// from = head is valid: nothing yet, then what comes.
	boom := errors.New("sink broke")
	if err := subs.Subscribe(ctx, 0, ports.EventFilter{}, &chanSink{ch: make(chan item, 8), fail: boom}); !errors.Is(err, boom) {
		t.Fatalf("failing sink: %v, want %v", err, boom)
	}
	slow := &chanSink{ch: make(chan item, 8), fail: ports.ErrSubscriberTooSlow}
	if err := subs.Subscribe(ctx, 0, ports.EventFilter{}, slow); !errors.Is(err, ports.ErrSubscriberTooSlow) {
		t.Fatalf("slow sink: %v, want ErrSubscriberTooSlow", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch, done := make(chan item, 8), make(chan error, 1)
	go func() { done <- subs.Subscribe(cctx, 3, ports.EventFilter{}, &chanSink{ch: ch}) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Subscribe after ctx ended = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Subscribe did not return after ctx ended")
	}
}
