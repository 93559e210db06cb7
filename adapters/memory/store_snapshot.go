package memory

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// InboxRow is a stored inbox row.
type InboxRow struct {
	Group  string
	Entry  ports.InboxEntry
	Status ports.InboxStatus // PROCESSING until finished
	Detail string
	// ReceivedAt and UpdatedAt are transaction times (Tx.Now).
	ReceivedAt time.Time
	UpdatedAt  time.Time
	seq        int64
}

// LedgerRow is a stored inventory ledger entry.
type LedgerRow struct {
	Entry     ports.LedgerEntry
	CreatedAt time.Time
	seq       int64
}

// OutboxRow is a stored outbox row.
type OutboxRow struct {
	Record ports.OutboxRecord
	// TxSeq numbers the transaction that wrote the row.
	TxSeq       uint64
	CreatedAt   time.Time
	AvailableAt time.Time
	// PublishedAt is zero while unpublished.
	PublishedAt time.Time
	LastError   string
}

// RejectionRow is a stored rejection.
type RejectionRow struct {
	Rejection ports.Rejection
	seq       int64
}

// QuarantineRow is a stored quarantined message.
type QuarantineRow struct {
	Message   ports.QuarantinedMessage
	CreatedAt time.Time
	seq       int64
}

// OutcomeRow is a stored reservation outcome.
type OutcomeRow struct {
	Claim ports.ReservationClaim
	// Status is PROCESSING until finished, then ORDERED or REJECTED.
	Status    string
	Reason    string
	ClaimedAt time.Time
	seq       int64
}

// StoreSnapshot is a copy of the committed state of a Store, for test
// assertions. Slices are in insertion order (outbox by id, orders by
// order id, activities by ids).
type StoreSnapshot struct {
	Orders     []order.Snapshot
	Events     map[string][]order.Event
	Ledger     []LedgerRow
	Outbox     []OutboxRow
	Inbox      []InboxRow
	Rejections []ports.Rejection
	Quarantine []QuarantineRow
	Outcomes   []OutcomeRow
	Activities []ports.Activity
	Stock      map[SKU]int64
	// DeadLetters are by id, DeadLetterAudit by id.
	DeadLetters     []DeadLetterRow
	DeadLetterAudit []AuditRow
}

// Snapshot returns a copy of the committed state (test facility). It never
// waits for a running transaction and sees none of its writes.
func (s *Store) Snapshot() StoreSnapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := &s.t
	snap := StoreSnapshot{
		Events: make(map[string][]order.Event, len(c.events)),
		Stock:  maps.Clone(c.stock),
	}
	snap.Orders = append(snap.Orders, sortedBy(c.orders, func(a, b order.Snapshot) int { return cmp.Compare(a.OrderID, b.OrderID) })...)
	for id, evs := range c.events {
		snap.Events[id] = slices.Clone(evs)
	}
	snap.Ledger = sortedBy(c.ledger, func(a, b LedgerRow) int { return cmp.Compare(a.seq, b.seq) })
	for _, row := range sortedBy(c.outbox, func(a, b OutboxRow) int { return cmp.Compare(a.Record.ID, b.Record.ID) }) {
		row.Record.Message = cloneMessage(row.Record.Message)
		snap.Outbox = append(snap.Outbox, row)
	}
	snap.Inbox = sortedBy(c.inbox, func(a, b InboxRow) int { return cmp.Compare(a.seq, b.seq) })
	for _, r := range sortedBy(c.rejections, func(a, b RejectionRow) int { return cmp.Compare(a.seq, b.seq) }) {
		snap.Rejections = append(snap.Rejections, r.Rejection)
	}
	for _, q := range sortedBy(c.quarantine, func(a, b QuarantineRow) int { return cmp.Compare(a.seq, b.seq) }) {
		q.Message.Body = slices.Clone(q.Message.Body)
		q.Message.Properties = maps.Clone(q.Message.Properties)
		snap.Quarantine = append(snap.Quarantine, q)
	}
	snap.Outcomes = sortedBy(c.outcomes, func(a, b OutcomeRow) int { return cmp.Compare(a.seq, b.seq) })
	snap.Activities = sortedBy(c.activities, func(a, b ports.Activity) int {
		return cmp.Or(cmp.Compare(a.ActivityID, b.ActivityID), cmp.Compare(a.SKUID, b.SKUID))
	})
	for _, d := range sortedBy(c.deadLetters, func(a, b DeadLetterRow) int { return cmp.Compare(a.DeadLetter.ID, b.DeadLetter.ID) }) {
		d.Record = cloneDeadLetterRecord(d.Record)
		snap.DeadLetters = append(snap.DeadLetters, d)
	}
	snap.DeadLetterAudit = sortedBy(c.dlAudit, func(a, b AuditRow) int { return cmp.Compare(a.ID, b.ID) })
	return snap
}

// sortedBy returns the values of m sorted by cmpFn.
func sortedBy[K comparable, V any](m map[K]V, cmpFn func(a, b V) int) []V {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, cmpFn)
	return out
}
