package rabbitmq

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/seckill-dev/seckill/ports"
)

// fakeChannel models what the broker holds unacknowledged on one channel
// and refuses what RabbitMQ refuses: an ack naming a tag that is not
// outstanding (406 unknown delivery tag, which closes the channel). It
// also checks that a multiple ack never covers a delivery whose decision
// is not an acknowledgement ready to send.
type fakeChannel struct {
	t *testing.T
	// unacked holds the outstanding tags; decided the tags whose
	// acknowledgement the handler allowed (set by the test before ready).
	unacked, decided map[uint64]bool
	// acks counts the acknowledgements each tag received; calls lists the
	// multiple acks' tags.
	acks   map[uint64]int
	calls  []uint64
	closed bool
	fail   error
}

func newFakeChannel(t *testing.T) *fakeChannel {
	return &fakeChannel{t: t, unacked: map[uint64]bool{}, decided: map[uint64]bool{}, acks: map[uint64]int{}}
}

func (f *fakeChannel) deliver(tags ...uint64) {
	for _, tag := range tags {
		f.unacked[tag] = true
	}
}

// settleAlone is an individual nack or reject (sent before the tracker
// is told).
func (f *fakeChannel) settleAlone(tag uint64) {
	if !f.unacked[tag] {
		f.t.Fatalf("individual settlement of tag %d, which is not outstanding", tag)
	}
	delete(f.unacked, tag)
}

func (f *fakeChannel) Ack(tag uint64, multiple bool) error {
	if !multiple {
		f.t.Fatalf("Ack(%d, false): the tracker only sends multiple acks", tag)
	}
	if f.fail != nil {
		return f.fail
	}
	f.calls = append(f.calls, tag)
	if !f.unacked[tag] {
		f.closed = true
		f.t.Fatalf("Ack(%d, true): unknown delivery tag (not outstanding)", tag)
	}
	for u := range f.unacked {
		if u > tag {
			continue
		}
		if !f.decided[u] {
			f.t.Fatalf("Ack(%d, true) covers tag %d, whose handler has not acknowledged it", tag, u)
		}
		delete(f.unacked, u)
		f.acks[u]++
	}
	return nil
}

func (f *fakeChannel) IsClosed() bool { return f.closed }

// item is the ackItem of tag (its message id is the tag).
func item(tag uint64) ackItem {
	return ackItem{d: ports.Delivery{Properties: map[string]string{"message_id": fmt.Sprint(tag)}}, dec: ports.Acked("ok")}
}

func ids(items []ackItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.d.Properties["message_id"])
	}
	return out
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAckTrackerHolesAndIndividualSettlements walks one channel through
// two interleaved batches: acknowledgements above an open tag wait, an
// individually settled tag inside the range is skipped, the multiple
// ack names the highest acknowledged tag of the settled prefix (never an
// individually settled one), and each flush sends at most one call.
func TestAckTrackerHolesAndIndividualSettlements(t *testing.T) {
	ch := newFakeChannel(t)
	tr := newAckTracker(ch)
	ch.deliver(1, 2, 3, 4, 5, 6, 7, 8)
	mustNil(t, tr.track(1, 2, 3, 4)) // batch A
	mustNil(t, tr.track(5, 6, 7, 8)) // batch B
	ready := func(tags ...uint64) {
		t.Helper()
		for _, tag := range tags {
			ch.decided[tag] = true
			mustNil(t, tr.ready(tag, item(tag)))
		}
	}
	alone := func(tag uint64) {
		t.Helper()
		ch.settleAlone(tag)
		mustNil(t, tr.settled(tag))
	}

	// B finishes first: 5 and 7 acknowledged, 6 rejected, 8 still parking.
	ready(5, 7)
	alone(6)
	if f := tr.flush(); f.sent || len(f.items) != 0 || len(ch.calls) != 0 {
		t.Fatalf("flush above the open batch A sent %v (items %v)", ch.calls, ids(f.items))
	}
	// A: 1, 3 acknowledged, 2 nacked, 4 acknowledged - out of order.
	ready(3)
	alone(2)
	if f := tr.flush(); f.sent {
		t.Fatalf("flush with tag 1 open sent %v", ch.calls)
	}
	ready(4, 1)
	f := tr.flush()
	if !f.sent || f.tag != 7 || f.err != nil || !slices.Equal(ids(f.items), []string{"1", "3", "4", "5", "7"}) {
		t.Fatalf("flush: sent %v tag %d err %v items %v; want Ack(7, true) for 1 3 4 5 7", f.sent, f.tag, f.err, ids(f.items))
	}
	if f := tr.flush(); f.sent || len(f.items) != 0 {
		t.Fatalf("a second flush sent again: %v", ch.calls)
	}
	// 8 settled alone (its park's own ack): nothing left to acknowledge.
	alone(8)
	if f := tr.flush(); f.sent {
		t.Fatalf("a prefix of individual settlements only sent %v", ch.calls)
	}
	// The next batch, whose last tag is settled alone: the ack names 10.
	ch.deliver(9, 10, 11)
	mustNil(t, tr.track(9, 10, 11))
	ready(9, 10)
	alone(11)
	if f := tr.flush(); f.tag != 10 || !slices.Equal(ids(f.items), []string{"9", "10"}) {
		t.Fatalf("flush: tag %d items %v; want Ack(10, true) for 9 10", f.tag, ids(f.items))
	}
	if !slices.Equal(ch.calls, []uint64{7, 10}) || len(ch.unacked) != 0 {
		t.Fatalf("multiple acks %v, still unacknowledged %v; want [7 10] and none", ch.calls, ch.unacked)
	}
	for tag, n := range ch.acks {
		if n != 1 {
			t.Errorf("tag %d acknowledged %d times", tag, n)
		}
	}

	if err := tr.track(5); !errors.Is(err, errUntracked) {
		t.Errorf("tracking tag 5 again: %v, want errUntracked", err)
	}
	if err := tr.ready(42, item(42)); !errors.Is(err, errUntracked) {
		t.Errorf("ready on an untracked tag: %v, want errUntracked", err)
	}
	mustNil(t, tr.track(12))
	mustNil(t, tr.settled(12))
	if err := tr.ready(12, item(12)); !errors.Is(err, errUntracked) {
		t.Errorf("ready after settled: %v, want errUntracked", err)
	}
}

// TestAckTrackerClosedOrFailingChannel: on a closed channel a flush
// sends nothing and returns every acknowledgement still outstanding
// (above holes too) as stale; an ack that fails returns its items with
// the error.
func TestAckTrackerClosedOrFailingChannel(t *testing.T) {
	ch := newFakeChannel(t)
	tr := newAckTracker(ch)
	mustNil(t, tr.track(1, 2, 3))
	mustNil(t, tr.ready(1, item(1)))
	ch.fail = errors.New("write: broken pipe")
	if f := tr.flush(); !f.sent || f.err == nil || !errors.Is(f.err, ch.fail) || !slices.Equal(ids(f.items), []string{"1"}) {
		t.Fatalf("failing ack: sent %v err %v items %v", f.sent, f.err, ids(f.items))
	}
	ch.fail = nil
	ch.closed = true
	mustNil(t, tr.ready(3, item(3)))
	f := tr.flush()
	if f.sent || !errors.Is(f.err, errStaleDelivery) || !slices.Equal(ids(f.items), []string{"3"}) || len(ch.calls) != 0 {
		t.Fatalf("closed channel: sent %v err %v items %v calls %v; want tag 3 stale, no call", f.sent, f.err, ids(f.items), ch.calls)
	}
}

// TestAckTrackerRandomSchedules settles the tags of concurrent batches in
// random orders, with random individual settlements and a flush after
// every batch's last settlement (as the runner does): the fake broker
// refuses any ack covering an undecided tag or naming a settled one, and
// at the end every acknowledged tag was acknowledged exactly once, in
// ascending multiple acks.
func TestAckTrackerRandomSchedules(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 14))
	for round := range 200 {
		ch := newFakeChannel(t)
		tr := newAckTracker(ch)
		var tag uint64
		var batches [][]uint64
		for range 1 + rng.IntN(6) {
			var b []uint64
			for range 1 + rng.IntN(8) {
				tag++
				b = append(b, tag)
			}
			ch.deliver(b...)
			mustNil(t, tr.track(b...))
			batches = append(batches, b)
		}
		// Each step settles one tag of a random batch; a batch flushes
		// after its last settlement.
		wantAcked := map[uint64]bool{}
		left := make([][]uint64, len(batches))
		for i, b := range batches {
			left[i] = slices.Clone(b)
			rng.Shuffle(len(left[i]), func(x, y int) { left[i][x], left[i][y] = left[i][y], left[i][x] })
		}
		for steps := 0; steps < int(tag)*2; steps++ {
			var open []int
			for i := range left {
				if len(left[i]) > 0 {
					open = append(open, i)
				}
			}
			if len(open) == 0 {
				break
			}
			i := open[rng.IntN(len(open))]
			next := left[i][0]
			left[i] = left[i][1:]
			if rng.IntN(4) == 0 {
				ch.settleAlone(next)
				mustNil(t, tr.settled(next))
			} else {
				ch.decided[next] = true
				wantAcked[next] = true
				mustNil(t, tr.ready(next, item(next)))
			}
			if len(left[i]) == 0 {
				tr.flush()
			}
		}
		if len(ch.unacked) != 0 {
			t.Fatalf("round %d: tags %v still unacknowledged after every batch settled (acks %v)", round, ch.unacked, ch.calls)
		}
		if !slices.IsSorted(ch.calls) || len(slices.Compact(slices.Clone(ch.calls))) != len(ch.calls) {
			t.Fatalf("round %d: multiple acks not ascending: %v", round, ch.calls)
		}
		for tg := range wantAcked {
			if ch.acks[tg] != 1 {
				t.Fatalf("round %d: tag %d acknowledged %d times", round, tg, ch.acks[tg])
			}
		}
		if len(ch.acks) != len(wantAcked) {
			t.Fatalf("round %d: %d tags acknowledged, want %d", round, len(ch.acks), len(wantAcked))
		}
	}
}
