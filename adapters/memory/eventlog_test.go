package memory_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// item is what a recording sink saw: an event (Type set) or a checkpoint.
type item struct {
	Position int64
	Type     order.EventType
}

// recordingSink sends every item to a channel and stops the subscription
// once it has seen want items.
type recordingSink struct {
	items  chan item
	cancel context.CancelFunc
	want   int
	seen   int
	onLive func() // called at the first checkpoint (the head reached), when set
}

func (s *recordingSink) push(it item) error {
	s.items <- it
	s.seen++
	if s.seen >= s.want {
		s.cancel()
	}
	return nil
}

func (s *recordingSink) Event(_ context.Context, e ports.EventRecord) error {
	return s.push(item{Position: e.Position, Type: e.Event.Type})
}

func (s *recordingSink) Checkpoint(_ context.Context, c ports.Checkpoint) error {
	if !c.Live {
		return errors.New("a checkpoint without live after the head was reached")
	}
	if s.onLive != nil {
		s.onLive()
		s.onLive = nil
	}
	return s.push(item{Position: c.Position})
}

func rec(activity int64, orderID string, v int64, t order.EventType) ports.EventRecord {
	return ports.EventRecord{ActivityID: activity, Event: order.Event{OrderID: orderID, Version: v, Type: t, SchemaVersion: 1}}
}

// subscribe runs a subscription until it has seen want items (bounded by
// 10 s) and returns them; onLive, when set, runs when the subscription
// reached the head (its first checkpoint).
func subscribe(t *testing.T, l *memory.EventLog, from int64, f ports.EventFilter, want int, onLive func()) []item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sink := &recordingSink{items: make(chan item, want), cancel: cancel, want: want, onLive: onLive}
	done := make(chan error, 1)
	go func() { done <- l.Subscribe(ctx, from, f, sink) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(sink.items)
	var got []item
	for it := range sink.items {
		got = append(got, it)
	}
	if len(got) != want {
		t.Fatalf("saw %d items before the bound, want %d: %v", len(got), want, got)
	}
	return got
}

func TestEventLogCatchUpLiveFilterCheckpoint(t *testing.T) {
	l := memory.NewEventLog(20 * time.Millisecond)
	l.Append(rec(1, "a", 1, order.EventCreated), rec(2, "b", 1, order.EventCreated), rec(1, "a", 2, order.EventPaid))

	// Catch-up from the beginning, the live checkpoint at the head, then
	// live: one record appended once the head was reached.
	got := subscribe(t, l, 0, ports.EventFilter{}, 5, func() { l.Append(rec(2, "b", 2, order.EventCanceled)) })
	want := []item{{1, order.EventCreated}, {2, order.EventCreated}, {3, order.EventPaid}, {3, ""}, {4, order.EventCanceled}}
	if !slices.Equal(got, want) {
		t.Fatalf("items %v, want %v", got, want)
	}

	// Filtered by activity 1 and ORDER_PAID after position 1: the event
	// at 3, then the checkpoint of the head (4), then an idle checkpoint.
	got = subscribe(t, l, 1, ports.EventFilter{ActivityID: 1, Types: []order.EventType{order.EventPaid}}, 3, nil)
	want = []item{{3, order.EventPaid}, {4, ""}, {4, ""}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("items %v, want %v", got, want)
		}
	}

	events, head, err := l.ReadEvents(context.Background(), 2, ports.EventFilter{Types: []order.EventType{order.EventCanceled}}, 10)
	if err != nil || head != 4 || len(events) != 1 || events[0].Position != 4 {
		t.Fatalf("ReadEvents = %v, head %d, %v", events, head, err)
	}
}

func TestEventLogRefusesBadRequests(t *testing.T) {
	l := memory.NewEventLog(time.Second)
	l.Append(rec(1, "a", 1, order.EventCreated))
	for _, c := range []struct {
		from  int64
		f     ports.EventFilter
		field string
	}{
		{-1, ports.EventFilter{}, "from_position"},
		{2, ports.EventFilter{}, "from_position"},
		{0, ports.EventFilter{Types: []order.EventType{"ORDER_SHIPPED"}}, "event_types"},
	} {
		err := l.Subscribe(context.Background(), c.from, c.f, &recordingSink{})
		var fe *ports.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Fatalf("Subscribe(%d, %v) = %v, want a FieldError on %s", c.from, c.f, err, c.field)
		}
	}
}
