package projector_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/projector"
	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// TestExactlyOnceAcrossCrash: a Run "killed" at its third batch (the
// failpoint before the checkpoint cancels it and fails the batch) leaves
// the first two batches committed and the third rolled back; a second Run,
// whose failpoint fails one batch once more (an in-process retry), resumes
// from the stored position and ends with every event applied exactly once
// and the checkpoint at the last position.
func TestExactlyOnceAcrossCrash(t *testing.T) {
	pool, store := newStore(t)
	want := events(1, 30, "ord_a", "ord_b", "ord_c")
	src := newFakeSource(want...)
	h := newCounter()
	opt := options("crash", 1)
	view := projector.View{Name: "crash", Version: 1}

	var mu sync.Mutex
	var batches []int64 // the last position of each batch reaching the failpoint
	crashed := make(chan struct{})
	var first *running
	opt.BeforeCheckpoint = func(_ context.Context, pos int64) error {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, pos)
		if len(batches) == 3 {
			close(crashed)
			first.cancel() // the process dies here
			return errors.New("crash before the checkpoint")
		}
		return nil
	}
	mu.Lock()
	first = start(t, src, h, store, opt)
	mu.Unlock()
	<-crashed
	if err := first.stop(t); err != nil {
		t.Fatalf("Run after the crash: %v", err)
	}
	mu.Lock()
	committed := batches[1]
	mu.Unlock()
	if got := position(t, store, "crash", 1); got != committed {
		t.Fatalf("after the crash at the batch up to %d the checkpoint is %d, want %d (the second batch's)", batches[2], got, committed)
	}
	onceEach(t, appliedIDs(t, pool, view), want[:committed])

	failed := false
	opt.BeforeCheckpoint = func(_ context.Context, pos int64) error {
		mu.Lock()
		defer mu.Unlock()
		if pos > 16 && !failed {
			failed = true
			return errors.New("failpoint: one batch fails")
		}
		return nil
	}
	second := start(t, src, h, store, opt)
	eventually(t, "checkpoint at the last position 30", func() bool { return position(t, store, "crash", 1) == 30 })
	if err := second.stop(t); err != nil {
		t.Fatal(err)
	}
	onceEach(t, appliedIDs(t, pool, view), want)
	if c := counts(t, pool, view); c["ord_a"] != 10 || c["ord_b"] != 10 || c["ord_c"] != 10 {
		t.Fatalf("counts %v, want 10 per order", c)
	}
	subs := src.subscriptions()
	if len(subs) < 3 || subs[1] != committed || !failed {
		t.Fatalf("subscriptions from %v (failpoint hit: %v), want the second Run to start from %d and resubscribe", subs, failed, committed)
	}
}

// TestDuplicatesAfterReconnect: a stream cut after every 7 items whose
// resubscriptions redeliver 5 positions below the asked one; every event
// is applied once.
func TestDuplicatesAfterReconnect(t *testing.T) {
	pool, store := newStore(t)
	want := events(1, 25, "ord_a", "ord_b")
	src := newFakeSource(want...)
	src.failAfter, src.failSubs, src.redeliver = 7, 6, 5
	h := newCounter()
	opt := options("dups", 1)
	opt.Batch = 3
	r := start(t, src, h, store, opt)
	eventually(t, "checkpoint at 25", func() bool { return position(t, store, "dups", 1) == 25 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	onceEach(t, appliedIDs(t, pool, projector.View{Name: "dups", Version: 1}), want)
	if subs := src.subscriptions(); len(subs) < 4 {
		t.Fatalf("subscriptions %v, want several (the stream is cut)", subs)
	}
}

// TestHandlerRetriesThenParks: an event whose Apply fails twice is applied
// once at the third attempt (the failed attempts' writes rolled back to
// their savepoints) and not parked; an event failing with ErrPermanent is
// parked at once, after one attempt.
func TestHandlerRetriesThenParks(t *testing.T) {
	pool, store := newStore(t)
	want := []*seckillv1.OrderEvent{ev(1, "ord_a", 1), ev(2, "ord_b", 1), ev(3, "ord_c", 1)}
	src := newFakeSource(want...)
	h := newCounter()
	h.set(func(c *counter) { c.transient["ord_a:1"] = 2; c.permanent["ord_b:1"] = true })
	r := start(t, src, h, store, options("retry", 1))
	eventually(t, "checkpoint at 3", func() bool { return position(t, store, "retry", 1) == 3 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	got := appliedIDs(t, pool, projector.View{Name: "retry", Version: 1})
	if !slices.Equal(got, []string{"ord_a:1", "ord_c:1"}) {
		t.Fatalf("applied %v, want ord_a:1 once and ord_c:1 (ord_b:1 parked, its writes rolled back)", got)
	}
	if n := h.callsOf("ord_a:1"); n != 3 {
		t.Fatalf("ord_a:1 tried %d times, want 3", n)
	}
	if n := h.callsOf("ord_b:1"); n != 1 {
		t.Fatalf("ord_b:1 (permanent) tried %d times, want 1", n)
	}
	parked, err := store.Parked(context.Background(), "retry", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].Position != 2 || parked[0].OrderID != "ord_b" || parked[0].EventID != "ord_b:1" ||
		parked[0].EventType != "ORDER_CREATED" || parked[0].Attempts != 1 ||
		!strings.Contains(parked[0].Error, "cannot be applied") || parked[0].ParkedAt.IsZero() {
		t.Fatalf("parked %+v, want ord_b:1 after one attempt", parked)
	}
}

// TestPerOrderParking: order X's second event fails permanently, so X's
// third is parked behind it while order Y's events are applied; Parked
// lists them; RetryParked keeps them while the handler still fails, then
// applies X's 2 and 3 in order once it is fixed. Order Z, parked the same
// way, is unparked by the periodic retry of a later Run.
func TestPerOrderParking(t *testing.T) {
	pool, store := newStore(t)
	src := newFakeSource(
		ev(1, "X", 1), ev(2, "Y", 1), ev(3, "Z", 1), ev(4, "X", 2), ev(5, "Y", 2), ev(6, "Z", 2),
		ev(7, "X", 3), ev(8, "Y", 3), ev(9, "Z", 3))
	h := newCounter()
	h.set(func(c *counter) { c.permanent["X:2"] = true; c.permanent["Z:2"] = true })
	opt := options("parking", 1)
	view := projector.View{Name: "parking", Version: 1}
	ctx := context.Background()
	r := start(t, src, h, store, opt)
	eventually(t, "checkpoint at 9", func() bool { return position(t, store, "parking", 1) == 9 })

	parked, err := store.Parked(ctx, "parking", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range parked {
		got = append(got, p.EventID+" "+p.Error)
	}
	if len(parked) != 4 || parked[0].EventID != "X:2" || parked[1].EventID != "Z:2" ||
		parked[2].EventID != "X:3" || parked[2].Error != "behind parked position 4" || parked[2].Attempts != 0 ||
		parked[3].EventID != "Z:3" || parked[3].Error != "behind parked position 6" {
		t.Fatalf("parked %q, want X:2, Z:2, then X:3 and Z:3 behind them", got)
	}
	if c := counts(t, pool, view); c["Y"] != 3 || c["X"] != 1 || c["Z"] != 1 {
		t.Fatalf("counts %v, want Y's three events and the first of X and Z", c)
	}

	// Still failing: nothing applied, X:2 has one more attempt.
	if n, err := projector.RetryParked(ctx, h, store, opt, "X"); err != nil || n != 0 {
		t.Fatalf("RetryParked of a still failing order = %d, %v; want 0, nil", n, err)
	}
	parked, _ = store.Parked(ctx, "parking", 1)
	if len(parked) != 4 || parked[0].Attempts != 2 {
		t.Fatalf("after a failed retry: %+v, want X:2 still parked with 2 attempts", parked)
	}
	h.set(func(c *counter) { delete(c.permanent, "X:2") })
	if n, err := projector.RetryParked(ctx, h, store, opt, "X"); err != nil || n != 2 {
		t.Fatalf("RetryParked of the fixed order = %d, %v; want 2, nil", n, err)
	}
	var xs []string
	for _, id := range appliedIDs(t, pool, view) {
		if strings.HasPrefix(id, "X:") {
			xs = append(xs, id)
		}
	}
	if !slices.Equal(xs, []string{"X:1", "X:2", "X:3"}) {
		t.Fatalf("order X applied as %v, want X:1, X:2, X:3", xs)
	}
	parked, _ = store.Parked(ctx, "parking", 1)
	if len(parked) != 2 || parked[0].OrderID != "Z" || parked[1].OrderID != "Z" {
		t.Fatalf("after X's retry the parked events are %+v, want Z's two", parked)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// The periodic retry of a new Run unparks Z once it is fixed.
	h.set(func(c *counter) { delete(c.permanent, "Z:2") })
	opt.RetryParkedEvery = 20 * time.Millisecond
	r = start(t, src, h, store, opt)
	eventually(t, "no parked events", func() bool {
		p, err := store.Parked(ctx, "parking", 1)
		return err == nil && len(p) == 0
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	applied := appliedIDs(t, pool, view)
	if i2, i3 := slices.Index(applied, "Z:2"), slices.Index(applied, "Z:3"); i2 < 0 || i3 < i2 {
		t.Fatalf("applied %v, want Z:2 then Z:3", applied)
	}
	if c := counts(t, pool, view); c["X"] != 3 || c["Y"] != 3 || c["Z"] != 3 {
		t.Fatalf("counts %v, want 3 per order", c)
	}
}

// TestBlueGreenRebuild: version 1, the first ever, replays history without
// side effects, becomes active at its live checkpoint, then calls
// AfterCommit for a new event. Version 2, started beside it from 0, has no
// side effects during its catch-up, becomes active at its live
// checkpoint, then calls AfterCommit; version 1 ends with ErrSuperseded
// at its next batch (and a new Run of it at once).
func TestBlueGreenRebuild(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	src := newFakeSource(events(1, 6, "A", "B")...)
	h := newCounter()
	v1 := start(t, src, h, store, options("sales", 1))
	eventually(t, "version 1 active", func() bool { v, ok, err := store.Active(ctx, "sales"); return err == nil && ok && v == 1 })
	if got := h.afterCommits(); len(got) != 0 {
		t.Fatalf("AfterCommit during version 1's replay of history: %v", got)
	}
	src.append(ev(7, "C", 1))
	eventually(t, "version 1 at 7", func() bool { return position(t, store, "sales", 1) == 7 })
	if got := h.afterCommits(); !slices.Equal(got, []string{"v1:C:1"}) {
		t.Fatalf("AfterCommit %v, want v1:C:1", got)
	}

	v2 := start(t, src, h, store, options("sales", 2))
	eventually(t, "version 2 active", func() bool { v, ok, err := store.Active(ctx, "sales"); return err == nil && ok && v == 2 })
	if got := h.afterCommits(); !slices.Equal(got, []string{"v1:C:1"}) {
		t.Fatalf("AfterCommit %v during version 2's catch-up, want only v1:C:1", got)
	}
	if got := position(t, store, "sales", 2); got != 7 {
		t.Fatalf("version 2 switched at %d, want 7 (the head)", got)
	}
	src.append(ev(8, "D", 1))
	if err := v1.wait(t); !errors.Is(err, projector.ErrSuperseded) {
		t.Fatalf("version 1's Run returned %v, want ErrSuperseded", err)
	}
	eventually(t, "version 2 at 8", func() bool { return position(t, store, "sales", 2) == 8 })
	if err := v2.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := h.afterCommits(); !slices.Equal(got, []string{"v1:C:1", "v2:D:1"}) {
		t.Fatalf("AfterCommit %v, want v1:C:1 then v2:D:1 (none for version 1 once superseded)", got)
	}
	if got := position(t, store, "sales", 1); got != 7 {
		t.Fatalf("version 1 committed up to %d after it was superseded, want 7", got)
	}
	onceEach(t, appliedIDs(t, pool, projector.View{Name: "sales", Version: 2}), append(events(1, 6, "A", "B"), ev(7, "C", 1), ev(8, "D", 1)))
	if err := projector.Run(ctx, src, h, store, options("sales", 1)); !errors.Is(err, projector.ErrSuperseded) {
		t.Fatalf("a new Run of version 1 returned %v, want ErrSuperseded", err)
	}
	if _, err := projector.RetryParked(ctx, h, store, options("sales", 1), "A"); !errors.Is(err, projector.ErrSuperseded) {
		t.Fatalf("RetryParked of version 1 returned %v, want ErrSuperseded", err)
	}
	if v, ok, err := store.Active(ctx, "sales"); err != nil || !ok || v != 2 {
		t.Fatalf("active version %d, %v, %v; want 2", v, ok, err)
	}
}

// TestOptionsValidation: a Run or RetryParked without a Name, with
// Version 0 or a negative value, or without a Source, fails at once with
// an error naming the option.
func TestOptionsValidation(t *testing.T) {
	ctx := context.Background()
	src := newFakeSource()
	h := newCounter()
	store := projector.NewStore(nil)
	cases := []struct {
		name string
		opt  projector.Options
		want string
	}{
		{"no name", projector.Options{Version: 1}, "Name"},
		{"version 0", projector.Options{Name: "v"}, "Version"},
		{"negative version", projector.Options{Name: "v", Version: -1}, "Version"},
		{"negative batch", projector.Options{Name: "v", Version: 1, Batch: -1}, "Batch"},
		{"negative retries", projector.Options{Name: "v", Version: 1, Retries: -1}, "Retries"},
		{"negative backoff", projector.Options{Name: "v", Version: 1, BackoffBase: -1}, "BackoffBase"},
		{"nil store pool", projector.Options{Name: "v", Version: 1}, "Store"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := projector.Run(ctx, src, h, store, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want an error naming %s", err, c.want)
			}
			if _, err := projector.RetryParked(ctx, h, store, c.opt, "X"); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RetryParked: %v, want an error naming %s", err, c.want)
			}
		})
	}
	if err := projector.Run(ctx, nil, h, store, projector.Options{Name: "v", Version: 1}); err == nil || !strings.Contains(err.Error(), "Source") {
		t.Fatalf("Run without a Source: %v", err)
	}
}

// gatedSource holds every subscription of src until open is closed;
// entered is closed when the first one begins.
type gatedSource struct {
	src     projector.Source
	open    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (g *gatedSource) Stream(ctx context.Context, from int64, fn func(context.Context, projector.Item) error) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-ctx.Done():
		return nil
	case <-g.open:
	}
	return g.src.Stream(ctx, from, fn)
}

// TestLowerVersionNeverSwitchesBack: a version that started rebuilding
// while no version was active, and reaches its live checkpoint after a
// higher version became active, leaves the higher one active and ends with
// ErrSuperseded, its batch rolled back.
func TestLowerVersionNeverSwitchesBack(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	gate := &gatedSource{src: newFakeSource(events(1, 3, "A")...), open: make(chan struct{}), entered: make(chan struct{})}
	r := start(t, gate, newCounter(), store, options("late", 1))
	// Run has read its (rebuilding) state once it subscribes.
	select {
	case <-gate.entered:
	case err := <-r.done:
		t.Fatalf("Run returned %v before it subscribed", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO projector_active (name, version) VALUES ('late', 2)`); err != nil {
		t.Fatal(err)
	}
	close(gate.open)
	if err := r.wait(t); !errors.Is(err, projector.ErrSuperseded) {
		t.Fatalf("Run of the lower version returned %v, want ErrSuperseded", err)
	}
	if v, ok, err := store.Active(ctx, "late"); err != nil || !ok || v != 2 {
		t.Fatalf("active version %d, %v, %v; want 2", v, ok, err)
	}
	if got := position(t, store, "late", 1); got != 0 {
		t.Fatalf("the superseded version committed up to %d, want nothing", got)
	}
}

// TestTwoRunsOfOneVersion: two Runs of the same version at once (two
// replicas) over one log apply every event once: the checkpoint's row
// lock makes the one that waited resubscribe from the moved position.
func TestTwoRunsOfOneVersion(t *testing.T) {
	pool, store := newStore(t)
	want := events(1, 40, "ord_a", "ord_b", "ord_c")
	h := newCounter()
	opt := options("twins", 1)
	opt.Batch = 2
	a := start(t, newFakeSource(want...), h, store, opt)
	b := start(t, newFakeSource(want...), h, store, opt)
	eventually(t, "checkpoint at 40", func() bool { return position(t, store, "twins", 1) == 40 })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	onceEach(t, appliedIDs(t, pool, projector.View{Name: "twins", Version: 1}), want)
}
