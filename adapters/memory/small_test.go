package memory_test

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/ports"
)

func TestIDs(t *testing.T) {
	g := memory.NewIDs()
	form := regexp.MustCompile(`^ord_[0-9A-HJKMNP-TV-Z]{26}$`)
	first, second := g.NewID(ports.IDOrder), g.NewID(ports.IDOrder)
	if first != "ord_00000000000000000000000001" || !form.MatchString(second) || second <= first {
		t.Fatalf("ids %q, %q", first, second)
	}
	if got := g.NewID(ports.IDReservation); got != "rsv_00000000000000000000000001" {
		t.Fatalf("first reservation id %q", got)
	}
	for range 40 {
		g.NewID(ports.IDOrder)
	}
	if got := g.NewID(ports.IDOrder); got != "ord_0000000000000000000000001B" { // 43 = 1*32 + 11
		t.Fatalf("43rd id %q", got)
	}
}

func TestClock(t *testing.T) {
	c := memory.NewClock(start)
	if got := c.Advance(time.Minute); !got.Equal(start.Add(time.Minute)) || !c.Now().Equal(got) {
		t.Fatalf("Advance = %v", got)
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Fatal("Set")
	}
}

func TestFailpoints(t *testing.T) {
	fp := memory.NewFailpoints()
	ctx := t.Context()
	if err := ports.Inject(ctx, fp, ports.FailAfterSend); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	fp.Set(ports.FailAfterSend, memory.FailpointAction{Err: boom, Times: 2})
	for i := range 2 {
		if err := fp.Inject(ctx, ports.FailAfterSend); !errors.Is(err, boom) {
			t.Fatalf("hit %d: %v", i, err)
		}
	}
	if err := fp.Inject(ctx, ports.FailAfterSend); err != nil {
		t.Fatalf("after Times ran out: %v", err)
	}
	if fp.Hits(ports.FailAfterSend) != 4 {
		t.Fatalf("hits %d", fp.Hits(ports.FailAfterSend))
	}
	fp.SetDelay(ports.FailAfterReserve, time.Hour)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := fp.Inject(canceled, ports.FailAfterReserve); !errors.Is(err, context.Canceled) {
		t.Fatalf("delay with a canceled context: %v", err)
	}
	hooked := false
	fp.Set(ports.FailRelayAfterPublish, memory.FailpointAction{Hook: func(context.Context) error { hooked = true; return nil }})
	if err := fp.Inject(ctx, ports.FailRelayAfterPublish); err != nil || !hooked {
		t.Fatalf("hook: %v, ran %v", err, hooked)
	}
	fp.ClearAll()
	if err := fp.Inject(canceled, ports.FailAfterReserve); err != nil {
		t.Fatalf("after ClearAll: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	m := memory.NewMetrics()
	m.ResendOutcome("CONFIRMED")
	m.ResendOutcome("CONFIRMED")
	m.CompensationApplied(false)
	m.Unresolved(3, time.Second)
	m.StockDrift(1, 2, -1)
	s := m.Snapshot()
	if s.ResendOutcomes["CONFIRMED"] != 2 || s.CompensationApplied[false] != 1 ||
		s.Unresolved != (memory.Gauge{Count: 3, OldestAge: time.Second}) || s.UnresolvedReports != 1 ||
		s.StockDrift[memory.SKU{ActivityID: 1, SKUID: 2}] != -1 {
		t.Fatalf("snapshot %+v", s)
	}
	s.ResendOutcomes["CONFIRMED"] = 100
	if m.Snapshot().ResendOutcomes["CONFIRMED"] != 2 {
		t.Fatal("Snapshot is not a copy")
	}
}
