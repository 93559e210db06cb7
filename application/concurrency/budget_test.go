package concurrency_test

import (
	"testing"
	"time"

	"github.com/seckill-dev/seckill/application/concurrency"
)

// While the order-create reservations near their deadline, the other
// groups yield to their floor and order-create may grow into what they
// freed; afterwards each group has its own budget again.
func TestBudgetPriorityGroupBorrowsWhileUrgent(t *testing.T) {
	c := newClock()
	orders := newLimiter(t, concurrency.Config{Group: "orders", Floor: 2, Budget: 10, GrowStep: 4}, c)
	audit := newLimiter(t, concurrency.Config{Group: "audit", Floor: 1, Budget: 4}, c)
	events := newLimiter(t, concurrency.Config{Group: "events", Floor: 1, Budget: 6}, c)
	b, err := concurrency.NewBudget(orders, audit, events)
	if err != nil {
		t.Fatal(err)
	}
	all := []*concurrency.Limiter{orders, audit, events}
	totalBudget := 10 + 4 + 6
	checkSum := func(when string) {
		t.Helper()
		sum := 0
		for _, st := range b.States() {
			sum += st.Ceiling
			if st.Limit > st.Ceiling || st.Limit < st.Floor {
				t.Errorf("%s: %s limit %d outside [%d, %d]", when, st.Group, st.Limit, st.Floor, st.Ceiling)
			}
		}
		if sum > totalBudget {
			t.Errorf("%s: ceilings sum to %d, above the budgets' %d", when, sum, totalBudget)
		}
	}
	tick := func(ordersSignals concurrency.Signals) map[string]concurrency.Decision {
		for _, l := range all {
			busy(l, 1, time.Millisecond)
		}
		c.Advance(time.Second)
		return b.Tick(map[string]concurrency.Signals{"orders": ordersSignals, "audit": lagHigh(), "events": lagHigh()})
	}

	// Normal: every group at its own budget.
	tick(lagHigh())
	if b.Urgent() || orders.Limit() != 10 || audit.Limit() != 4 || events.Limit() != 6 {
		t.Fatalf("normal: urgent %v, limits %d/%d/%d; want 10/4/6", b.Urgent(), orders.Limit(), audit.Limit(), events.Limit())
	}
	checkSum("normal")

	// Urgent: the others yield at once; orders grows into 10+3+5 = 18.
	urgent := concurrency.Signals{Lag: time.Minute, ReservationDeadline: c.Now().Add(5 * time.Second)}
	ds := tick(urgent)
	if !ds["orders"].Urgent || !b.Urgent() || audit.Limit() != 1 || events.Limit() != 1 {
		t.Fatalf("urgent: %+v, limits audit %d events %d; want both at 1", ds["orders"], audit.Limit(), events.Limit())
	}
	checkSum("urgent")
	for range 3 {
		urgent.ReservationDeadline = c.Now().Add(5 * time.Second)
		tick(urgent)
		checkSum("urgent")
	}
	if orders.Limit() != 18 {
		t.Fatalf("orders limit %d while urgent, want the freed budget: 18", orders.Limit())
	}
	if b.Highest("orders") != 18 || b.Highest("audit") != 4 || b.Highest("events") != 6 || b.Highest("other") != 0 {
		t.Fatalf("Highest orders/audit/events/other = %d/%d/%d/%d; want 18/4/6/0",
			b.Highest("orders"), b.Highest("audit"), b.Highest("events"), b.Highest("other"))
	}
	if audit.Limit() != 1 || events.Limit() != 1 {
		t.Fatalf("limits audit %d events %d while urgent, want 1", audit.Limit(), events.Limit())
	}

	// Over: orders is cut back at once, the others grow back (GrowStep 2).
	tick(lagHigh())
	if b.Urgent() || orders.Limit() != 10 || audit.Limit() != 3 || events.Limit() != 3 {
		t.Fatalf("after: urgent %v, limits %d/%d/%d; want 10/3/3", b.Urgent(), orders.Limit(), audit.Limit(), events.Limit())
	}
	tick(lagHigh())
	tick(lagHigh())
	if audit.Limit() != 4 || events.Limit() != 6 {
		t.Fatalf("others got their budget back: %d/%d, want 4/6", audit.Limit(), events.Limit())
	}
	checkSum("after")
}

// A group without signals is not ticked but yields all the same.
func TestBudgetGroupWithoutSignalsYields(t *testing.T) {
	c := newClock()
	orders := newLimiter(t, concurrency.Config{Group: "orders", Budget: 10}, c)
	audit := newLimiter(t, concurrency.Config{Group: "audit", Floor: 2, Budget: 5}, c)
	b, err := concurrency.NewBudget(orders, audit)
	if err != nil {
		t.Fatal(err)
	}
	ds := b.Tick(map[string]concurrency.Signals{"orders": {Lag: time.Minute, ReservationDeadline: c.Now()}})
	if _, ticked := ds["audit"]; ticked || audit.Limit() != 2 || audit.State().Last.Reason != concurrency.ReasonStart {
		t.Fatalf("audit: decisions %v, limit %d, state %+v; want untouched at its floor 2", ds, audit.Limit(), audit.State())
	}
	if st := orders.State(); st.Ceiling != 13 {
		t.Fatalf("orders ceiling %d, want 13", st.Ceiling)
	}
}

func TestNewBudgetRejects(t *testing.T) {
	c := newClock()
	a := newLimiter(t, concurrency.Config{Group: "a", Budget: 2}, c)
	a2 := newLimiter(t, concurrency.Config{Group: "a", Budget: 3}, c)
	if _, err := concurrency.NewBudget(nil); err == nil {
		t.Error("nil priority accepted")
	}
	if _, err := concurrency.NewBudget(a, nil); err == nil {
		t.Error("nil limiter accepted")
	}
	if _, err := concurrency.NewBudget(a, a2); err == nil {
		t.Error("a group twice accepted")
	}
}

// An instance's share scales every ceiling (never below a Floor), cuts the
// limits at once, and a whole share gives the budgets back.
func TestBudgetShareScalesTheCeilings(t *testing.T) {
	c := newClock()
	orders := newLimiter(t, concurrency.Config{Group: "orders", Floor: 2, Budget: 20, GrowStep: 20}, c)
	audit := newLimiter(t, concurrency.Config{Group: "audit", Floor: 1, Budget: 4, GrowStep: 4}, c)
	b, err := concurrency.NewBudget(orders, audit)
	if err != nil {
		t.Fatal(err)
	}
	if b.Total() != 24 {
		t.Fatalf("Total %d, want 24", b.Total())
	}
	tick := func() {
		busy(orders, orders.Limit(), time.Millisecond)
		busy(audit, audit.Limit(), time.Millisecond)
		c.Advance(time.Second)
		b.Tick(map[string]concurrency.Signals{"orders": lagHigh(), "audit": lagHigh()})
	}
	b.SetShare(0.25) // four live instances
	if orders.Limit() != 5 || audit.Limit() != 1 {
		t.Fatalf("share 1/4: limits %d/%d, want 5/1", orders.Limit(), audit.Limit())
	}
	tick()
	if st := orders.State(); st.Limit != 5 || st.Ceiling != 5 {
		t.Fatalf("share 1/4 after growth: orders %+v, want limit and ceiling 5", st)
	}
	b.SetShare(0.01)
	if orders.Limit() != 2 || audit.Limit() != 1 {
		t.Fatalf("tiny share: limits %d/%d, want the floors 2/1", orders.Limit(), audit.Limit())
	}
	b.SetShare(5) // clamped to 1
	tick()
	if orders.Limit() != 20 || audit.Limit() != 4 {
		t.Fatalf("whole share: limits %d/%d, want the budgets 20/4", orders.Limit(), audit.Limit())
	}
	// While urgent the priority group's borrowed ceiling is scaled too.
	b.SetShare(0.5)
	busy(orders, orders.Limit(), time.Millisecond)
	c.Advance(time.Second)
	b.Tick(map[string]concurrency.Signals{"orders": {Lag: time.Minute, ReservationDeadline: c.Now().Add(5 * time.Second)}, "audit": lagHigh()})
	if st := orders.State(); !b.Urgent() || st.Ceiling != 11 {
		t.Fatalf("urgent at share 1/2: urgent %v, orders ceiling %d, want (20+3)/2 = 11", b.Urgent(), st.Ceiling)
	}
}
