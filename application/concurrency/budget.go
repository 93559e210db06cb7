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
//
// A Budget is also one instance's part of a budget shared by several
// instances (spec 22.1): SetShare scales every ceiling by the instance's
// share, so the instances together stay within the shared budget.
type Budget struct {
	mu       sync.Mutex
	priority *Limiter
	others   []*Limiter
	urgent   bool
	share    float64 // in (0, 1]: the part of its ceilings this instance may use
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
	return &Budget{priority: priority, others: others, share: 1}, nil
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
	b.apply()
}

// SetShare sets the part of every group's ceiling this instance may use,
// clamped to (0, 1] (a share of 0 or less is taken as the smallest: every
// group at its Floor); a ceiling never falls below its group's Floor.
func (b *Budget) SetShare(share float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	share = min(share, 1)
	if share == b.share {
		return
	}
	b.share = share
	b.apply()
}

// apply sets every ceiling from the urgency and the share; b.mu is held.
func (b *Budget) apply() {
	scaled := func(n int) int { return int(float64(n) * max(b.share, 0)) }
	if !b.urgent {
		b.priority.setCeiling(scaled(b.priority.cfg.Budget))
		for _, l := range b.others {
			l.setCeiling(scaled(l.cfg.Budget))
		}
		return
	}
	freed := 0
	for _, l := range b.others {
		freed += l.cfg.Budget - l.cfg.Floor
		l.setCeiling(l.cfg.Floor)
	}
	b.priority.setCeiling(scaled(b.priority.cfg.Budget + freed))
}

// Total returns the sum of the groups' Budgets: what the groups of one
// instance may run at once with a share of 1.
func (b *Budget) Total() int {
	n := b.priority.cfg.Budget
	for _, l := range b.others {
		n += l.cfg.Budget
	}
	return n
}

// Highest returns the highest ceiling group can ever be given: for the
// priority group its Budget plus what the others yield while it is urgent
// (their Budget − Floor), for another group its Budget; 0 for a group
// not in the budget. A runner's hard cap must be at least this for the
// borrowed calls to run.
func (b *Budget) Highest(group string) int {
	if group == b.priority.Group() {
		n := b.priority.cfg.Budget
		for _, l := range b.others {
			n += l.cfg.Budget - l.cfg.Floor
		}
		return n
	}
	for _, l := range b.others {
		if l.Group() == group {
			return l.cfg.Budget
		}
	}
	return 0
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
