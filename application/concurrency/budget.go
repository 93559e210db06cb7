package concurrency

import (
	"errors"
	"fmt"
	"sync"
)

// Budget shares one process's consumer concurrency between its groups
// (spec 21.2 step 4). One group has priority (order-create). While its
// decision is Urgent (its reservations near their deadline), every other
// group's ceiling is its Floor and the priority group's ceiling is its own
// Budget plus what the others yielded (their Budget − Floor); when the
// urgency ends each group has its own Budget again: the priority group is
// cut back at once, the others grow back by their own decisions. The sum
// of the ceilings never exceeds the sum of the groups' Budgets.
//
// The priority group's runner must allow the borrowed calls: its hard cap
// (RunnerConfig.Concurrency) bounds the limit whatever the ceiling.
//
// Budget is safe for concurrent use; it starts no goroutine.
type Budget struct {
	mu       sync.Mutex
	priority *Limiter
	others   []*Limiter
	urgent   bool
}

// NewBudget returns a budget over priority and the other limiters, each
// at its own Budget. The groups must be distinct.
func NewBudget(priority *Limiter, others ...*Limiter) (*Budget, error) {
	if priority == nil {
		return nil, errors.New("budget: nil priority limiter")
	}
	seen := map[string]bool{priority.Group(): true}
	for _, l := range others {
		if l == nil {
			return nil, errors.New("budget: nil limiter")
		}
		if seen[l.Group()] {
			return nil, fmt.Errorf("budget: group %s twice", l.Group())
		}
		seen[l.Group()] = true
	}
	return &Budget{priority: priority, others: others}, nil
}

// Tick ticks every limiter whose group has signals in signals (see
// Limiter.Tick), the priority group first; its decision's Urgent then sets
// the ceilings before the other groups tick. It returns the decisions by
// group. A group without signals is not ticked, but its ceiling follows.
func (b *Budget) Tick(signals map[string]Signals) map[string]Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]Decision, len(signals))
	if s, ok := signals[b.priority.Group()]; ok {
		d := b.priority.Tick(s)
		out[b.priority.Group()] = d
		b.setUrgent(d.Urgent)
	}
	for _, l := range b.others {
		if s, ok := signals[l.Group()]; ok {
			out[l.Group()] = l.Tick(s)
		}
	}
	return out
}

// setUrgent moves the ceilings when the urgency changes; b.mu is held.
func (b *Budget) setUrgent(urgent bool) {
	if urgent == b.urgent {
		return
	}
	b.urgent = urgent
	if !urgent {
		b.priority.setCeiling(b.priority.cfg.Budget)
		for _, l := range b.others {
			l.setCeiling(l.cfg.Budget)
		}
		return
	}
	freed := 0
	for _, l := range b.others {
		freed += l.cfg.Budget - l.cfg.Floor
		l.setCeiling(l.cfg.Floor)
	}
	b.priority.setCeiling(b.priority.cfg.Budget + freed)
}

// Urgent reports whether the other groups yield to the priority group now.
func (b *Budget) Urgent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.urgent
}

// States returns the state of every limiter, the priority group first.
func (b *Budget) States() []State {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []State{b.priority.State()}
	for _, l := range b.others {
		out = append(out, l.State())
	}
	return out
}
