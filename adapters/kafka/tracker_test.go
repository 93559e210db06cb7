package kafka

import "testing"

// TestOffsetTrackerWatermark: the watermark moves only over a contiguous
// prefix of finished offsets, whatever the order they finish in, skips
// offsets never tracked (gaps), and refuses an offset added out of order
// or finished twice.
func TestOffsetTrackerWatermark(t *testing.T) {
	tr := newOffsetTracker()
	if _, ok := tr.watermark(); ok {
		t.Fatal("an empty tracker has a watermark")
	}
	for _, off := range []int64{10, 11, 13, 14} { // 12 is a gap
		if err := tr.add(off); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.add(14); err == nil {
		t.Fatal("an offset added twice was accepted")
	}
	want := func(step string, w int64) {
		t.Helper()
		if got, ok := tr.watermark(); !ok || got != w {
			t.Fatalf("%s: watermark %d (%v), want %d", step, got, ok, w)
		}
	}
	want("nothing finished", 10)
	mustDone := func(off int64) {
		t.Helper()
		if err := tr.done(off); err != nil {
			t.Fatal(err)
		}
	}
	mustDone(13)
	want("13 finished above an unfinished 10", 10)
	mustDone(11)
	want("11 and 13 finished", 10)
	mustDone(10)
	want("10, 11, 13 finished", 14)
	if err := tr.done(12); err == nil {
		t.Fatal("a gap offset was finished")
	}
	if err := tr.done(11); err == nil {
		t.Fatal("an offset finished twice was accepted")
	}
	mustDone(14)
	want("all finished", 15)
	if err := tr.add(20); err != nil {
		t.Fatal(err)
	}
	want("a new unfinished record", 20)
}
