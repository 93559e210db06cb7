package application_test

import (
	"cmp"
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

// countingLog is a fakeLog that records the after of every ReadEvents
// call.
type countingLog struct {
	*fakeLog
	mu     sync.Mutex
	afters []int64
	limit  int // the largest limit asked for
}

func (l *countingLog) ReadEvents(ctx context.Context, after int64, f ports.EventFilter, limit int) ([]ports.EventRecord, int64, error) {
	l.mu.Lock()
	l.afters = append(l.afters, after)
	l.limit = max(l.limit, limit)
	l.mu.Unlock()
	return l.fakeLog.ReadEvents(ctx, after, f, limit)
}

// reads returns how many ReadEvents calls were made.
func (l *countingLog) reads() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.afters)
}

// readAfter reports whether a ReadEvents call after position p was made.
func (l *countingLog) readAfter(p int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.afters, p)
}

// maxLimit returns the largest limit a ReadEvents call asked for.
func (l *countingLog) maxLimit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// afterList returns the after of every ReadEvents call so far.
func (l *countingLog) afterList() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.afters)
}

// runTail runs the tail reader of subs until the test ends.
func runTail(t *testing.T, subs *application.EventSubscriptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := subs.Run(ctx); err != nil {
			t.Errorf("tail reader: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// eventually waits (bounded) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// nextLive skips items until the first live checkpoint and returns its
// position.
func nextLive(t *testing.T, ch <-chan item) int64 {
	t.Helper()
	for range 1000 {
		if it := next(t, ch); it.checkpoint && it.live {
			return it.position
		}
	}
	t.Fatal("no live checkpoint")
	return 0
}

// newTailed returns a log of n sequenced events of activity 1, its
// sequencer (not running: the test moves it) and subscriptions with cfg
// whose tail reader runs, once the window has reached the head.
func newTailed(t *testing.T, n int, cfg application.SubscriptionConfig) (*countingLog, *application.Sequencer, *application.EventSubscriptions) {
	t.Helper()
	l := &countingLog{fakeLog: &fakeLog{}}
	l.Add(1, order.EventCreated, n)
	seq := application.NewSequencer(l, l, nil, discard(), application.SequencerConfig{Batch: 100_000})
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	subs := application.NewEventSubscriptions(l, seq, nil, discard(), cfg)
	runTail(t, subs)
	// The tail reader probes the head, then reads pages after the
	// window's start until a short one.
	window, page := cmp.Or(cfg.Window, application.DefaultEventWindow), cmp.Or(cfg.Page, 1000)
	if n-max(0, n-window) < page {
		eventually(t, "the tail reader at the head", func() bool { return l.reads() >= 2 })
	} else {
		eventually(t, "the tail reader at the head", func() bool { return l.readAfter(int64(n)) })
	}
	return l, seq, subs
}

// move appends k events of activity act and sequences them (one move).
func move(t *testing.T, l *countingLog, seq *application.Sequencer, act int64, k int) {
	t.Helper()
	l.Add(act, order.EventPaid, k)
	if n, err := seq.SequenceOnce(context.Background()); err != nil || n != k {
		t.Fatalf("sequenced %d, %v; want %d", n, err, k)
	}
}

// Twenty live subscriptions at the head cost one read of the log per
// sequencer move (the tail reader's), not one each; every subscriber
// still gets every event once, in order.
func TestSubscribeLiveSubscribersShareOneReadPerMove(t *testing.T) {
	t.Parallel()
	l, seq, subs := newTailed(t, 30, application.SubscriptionConfig{Poll: time.Hour, CheckpointEvery: time.Hour})
	const n = 20
	chans := make([]<-chan item, n)
	for i := range chans {
		chans[i], _ = subscription(t, subs, 30, ports.EventFilter{})
		if got := nextLive(t, chans[i]); got != 30 {
			t.Fatalf("subscriber %d: live checkpoint at %d, want 30", i, got)
		}
	}
	pos := int64(30)
	for m := range 5 {
		before := l.reads()
		move(t, l, seq, 1, 3)
		for i, ch := range chans {
			for k := int64(1); k <= 3; k++ {
				if got := nextEvent(t, ch); got != pos+k {
					t.Fatalf("move %d, subscriber %d: position %d, want %d", m, i, got, pos+k)
				}
			}
		}
		pos += 3
		if got := l.reads() - before; got != 1 {
			t.Fatalf("move %d: %d reads of the log for %d live subscribers, want 1", m, got, n)
		}
	}
}

// A subscription far below the window catches up from the store (pages
// of the store, growing to 4 pages), joins the window and goes on live from it: every
// position once, in order, across both switches.
func TestSubscribeBelowWindowCatchesUpAndJoins(t *testing.T) {
	t.Parallel()
	l, seq, subs := newTailed(t, 500, application.SubscriptionConfig{Page: 10, Window: 50, Poll: time.Hour})
	ch, _ := subscription(t, subs, 0, ports.EventFilter{})
	for want := int64(1); want <= 500; want++ {
		if got := nextEvent(t, ch); got != want {
			t.Fatalf("catch-up: position %d, want %d", got, want)
		}
	}
	if got := nextLive(t, ch); got != 500 {
		t.Fatalf("live checkpoint at %d, want 500", got)
	}
	if !slices.ContainsFunc(l.afterList(), func(a int64) bool { return a > 0 && a < 450 }) {
		t.Fatal("the catch-up never read the store below the window (450, 500]")
	}
	// Catch-up pages grow, up to 4 pages.
	if got := l.maxLimit(); got != 40 {
		t.Errorf("largest read of %d events, want 40 (4 pages of 10)", got)
	}
	for m := range 3 {
		before := l.reads()
		move(t, l, seq, 1, 7)
		for k := int64(1); k <= 7; k++ {
			want := 500 + int64(7*m) + k
			if got := nextEvent(t, ch); got != want {
				t.Fatalf("live: position %d, want %d", got, want)
			}
		}
		if got := l.reads() - before; got != 1 {
			t.Fatalf("move %d: %d reads after joining the window, want 1 (the tail reader's)", m, got)
		}
	}
}

// A filtered subscription is served from the window with the filter
// applied in memory: only its activity's events, in order, a checkpoint
// at the new head when a move brought none of them, and no read of its
// own.
func TestSubscribeFilteredFromWindow(t *testing.T) {
	t.Parallel()
	l, seq, subs := newTailed(t, 10, application.SubscriptionConfig{Poll: time.Hour, CheckpointEvery: time.Hour})
	ch, _ := subscription(t, subs, 10, ports.EventFilter{ActivityID: 2, Types: []order.EventType{order.EventPaid}})
	if got := nextLive(t, ch); got != 10 {
		t.Fatalf("live checkpoint at %d, want 10", got)
	}
	before := l.reads()
	move(t, l, seq, 1, 4) // 11..14: none of activity 2
	if it := next(t, ch); it != (item{checkpoint: true, position: 14, live: true}) {
		t.Fatalf("item %+v, want a checkpoint at 14", it)
	}
	move(t, l, seq, 2, 2) // 15, 16
	for _, want := range []int64{15, 16} {
		if got := nextEvent(t, ch); got != want {
			t.Fatalf("filtered position %d, want %d", got, want)
		}
	}
	move(t, l, seq, 1, 1) // 17
	if it := next(t, ch); it != (item{checkpoint: true, position: 17, live: true}) {
		t.Fatalf("item %+v, want a checkpoint at 17", it)
	}
	move(t, l, seq, 2, 1) // 18
	if got := nextEvent(t, ch); got != 18 {
		t.Fatalf("filtered position %d, want 18", got)
	}
	// Each move was seen before the next: one read each, the tail
	// reader's.
	if n := l.reads() - before; n != 4 {
		t.Fatalf("%d reads of the log for 4 moves, want 4 (the tail reader's only)", n)
	}
}

// A subscription slow enough for the window to move past it while it
// delivers a page from it falls back to the store and goes on without a
// gap or a duplicate.
func TestSubscribeEvictedFromWindowFallsBackToStore(t *testing.T) {
	t.Parallel()
	l, seq, subs := newTailed(t, 100, application.SubscriptionConfig{Page: 5, Window: 20, Poll: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	sink := &chanSink{ch: make(chan item)} // unbuffered: the subscription waits for each take
	var wg sync.WaitGroup
	wg.Go(func() { _ = subs.Subscribe(ctx, 100, ports.EventFilter{}, sink) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if got := nextLive(t, sink.ch); got != 100 {
		t.Fatalf("live checkpoint at %d, want 100", got)
	}
	move(t, l, seq, 1, 100) // 101..200; the window ends as (180, 200]
	if got := nextEvent(t, sink.ch); got != 101 {
		t.Fatalf("first live position %d, want 101", got)
	}
	// The subscription holds the page 101..105 of the window; the tail
	// reader reads on to the head meanwhile.
	eventually(t, "the tail reader at 200", func() bool { return l.readAfter(200) })
	for want := int64(102); want <= 200; want++ {
		if got := nextEvent(t, sink.ch); got != want {
			t.Fatalf("position %d, want %d", got, want)
		}
	}
	if !l.readAfter(105) {
		t.Fatal("the evicted subscription did not read the store after 105")
	}
	move(t, l, seq, 1, 2)
	for want := int64(201); want <= 202; want++ {
		if got := nextEvent(t, sink.ch); got != want {
			t.Fatalf("after rejoining: position %d, want %d", got, want)
		}
	}
}

// Without its tail reader (never run, or ended) Subscribe reads the store
// itself; a second Run at the same time is refused.
func TestSubscribeWithoutTailReader(t *testing.T) {
	t.Parallel()
	l := &countingLog{fakeLog: &fakeLog{}}
	l.Add(1, order.EventCreated, 5)
	seq := application.NewSequencer(l, l, nil, discard(), application.SequencerConfig{})
	if _, err := seq.SequenceOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	subs := application.NewEventSubscriptions(l, seq, nil, discard(), application.SubscriptionConfig{Poll: time.Hour})
	ch, _ := subscription(t, subs, 0, ports.EventFilter{})
	for want := int64(1); want <= 5; want++ {
		if got := nextEvent(t, ch); got != want {
			t.Fatalf("position %d, want %d", got, want)
		}
	}
	runTail(t, subs)
	eventually(t, "the tail reader at the head", func() bool { return l.reads() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := subs.Run(ctx); err == nil {
		t.Fatal("a second Run while one runs returned nil, want an error")
	}
	move(t, l, seq, 1, 2)
	for want := int64(6); want <= 7; want++ {
		if got := nextEvent(t, ch); got != want {
			t.Fatalf("position %d, want %d", got, want)
		}
	}
}
