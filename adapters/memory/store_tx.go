package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// tx is the ports.Tx of one Store transaction: a layer over every
// committed table. Its methods are serialized by mu, so a callback may
// even call them from several goroutines.
type tx struct {
	s    *Store
	seq  uint64
	now  time.Time
	mu   sync.Mutex
	done bool

	inbox       *layer[inboxKey, InboxRow]
	orders      *layer[string, order.Snapshot]
	ordersByRsv *layer[string, string]
	activeOrder *layer[userSKU, string]
	events      *layer[string, []order.Event]
	ledger      *layer[ledgerKey, LedgerRow]
	outbox      *layer[int64, OutboxRow]
	unpublished *layer[int64, struct{}]
	rejections  *layer[string, RejectionRow]
	rejByRsv    *layer[string, string]
	quarantine  *layer[quarantineKey, QuarantineRow]
	activities  *layer[SKU, ports.Activity]
	stock       *layer[SKU, int64]
	outcomes    *layer[string, OutcomeRow]
	deadLetters *layer[int64, DeadLetterRow]
	dlByMessage *layer[deadLetterKey, int64]
	dlAudit     *layer[int64, AuditRow]
}

var (
	_ ports.Tx                      = (*tx)(nil)
	_ ports.ReservationOutcomeStore = (*tx)(nil)
)

// errTxDone is returned by a Tx used after its InTx returned.
var errTxDone = errors.New("memory store: transaction already finished")

func (s *Store) begin() *tx {
	c := &s.t
	return &tx{
		s:           s,
		seq:         s.txSeq.Add(1),
		now:         s.now(),
		inbox:       newLayer(c.inbox),
		orders:      newLayer(c.orders),
		ordersByRsv: newLayer(c.ordersByRsv),
		activeOrder: newLayer(c.activeOrder),
		events:      newLayer(c.events),
		ledger:      newLayer(c.ledger),
		outbox:      newLayer(c.outbox),
		unpublished: newLayer(c.unpublished),
		rejections:  newLayer(c.rejections),
		rejByRsv:    newLayer(c.rejByRsv),
		quarantine:  newLayer(c.quarantine),
		activities:  newLayer(c.activities),
		stock:       newLayer(c.stock),
		outcomes:    newLayer(c.outcomes),
		deadLetters: newLayer(c.deadLetters),
		dlByMessage: newLayer(c.dlByMessage),
		dlAudit:     newLayer(c.dlAudit),
	}
}

// finish makes every later call fail; it waits for a running call.
func (t *tx) finish() {
	t.mu.Lock()
	t.done = true
	t.mu.Unlock()
}

// commit applies every layer to the committed tables. The caller holds the
// store's write lock.
func (t *tx) commit() {
	t.inbox.commit()
	t.orders.commit()
	t.ordersByRsv.commit()
	t.activeOrder.commit()
	t.events.commit()
	t.ledger.commit()
	t.outbox.commit()
	t.unpublished.commit()
	t.rejections.commit()
	t.rejByRsv.commit()
	t.quarantine.commit()
	t.activities.commit()
	t.stock.commit()
	t.outcomes.commit()
	t.deadLetters.commit()
	t.dlByMessage.commit()
	t.dlAudit.commit()
}

// enter starts a call of method: it locks the transaction, checks that it
// is still open and ctx alive, and applies an injected fault. On success
// the caller must unlock t.mu and return after (the error of an
// AfterEffect fault, usually nil) once the call took effect.
func (t *tx) enter(ctx context.Context, method string) (after error, err error) {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return nil, fmt.Errorf("memory store %s: %w", method, errTxDone)
	}
	if err := ctx.Err(); err != nil {
		t.mu.Unlock()
		return nil, fmt.Errorf("memory store %s: %w", method, err)
	}
	before, after := t.s.faults.hit(method)
	if before != nil {
		t.mu.Unlock()
		return nil, before
	}
	return after, nil
}

// Now returns the clock's time read when the transaction began, in UTC at
// microsecond precision (PostgreSQL's now()); it is the same for every
// call within one transaction.
func (t *tx) Now(ctx context.Context) (time.Time, error) {
	after, err := t.enter(ctx, "Now")
	if err != nil {
		return time.Time{}, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return time.Time{}, after
	}
	return t.now, nil
}

// inboxProcessing is the status of a claimed, unfinished inbox row.
const inboxProcessing ports.InboxStatus = "PROCESSING"

// ClaimInbox inserts a PROCESSING row per entry whose (group, message id)
// is not stored yet (committed or earlier in this transaction) and returns
// their message ids in input order; repeated ids count once.
func (t *tx) ClaimInbox(ctx context.Context, group string, entries []ports.InboxEntry) ([]string, error) {
	after, err := t.enter(ctx, "ClaimInbox")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	var claimed []string
	for _, e := range entries {
		k := inboxKey{group, e.MessageID}
		if t.inbox.has(k) {
			continue
		}
		t.inbox.put(k, InboxRow{
			Group: group, Entry: e, Status: inboxProcessing,
			ReceivedAt: t.now, UpdatedAt: t.now, seq: t.s.nextRowSeq(),
		})
		claimed = append(claimed, e.MessageID)
	}
	if after != nil {
		return nil, after
	}
	return claimed, nil
}

// FinishInbox sets status and detail of the group's rows named in
// results, all or nothing. A status other than SUCCEEDED, REJECTED,
// DUPLICATE or NOOP fails the call, and so does a message id without a row
// of group (never claimed), with an error matching ports.ErrNotFound.
func (t *tx) FinishInbox(ctx context.Context, group string, results []ports.InboxResult) error {
	after, err := t.enter(ctx, "FinishInbox")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, r := range results {
		switch r.Status {
		case ports.InboxSucceeded, ports.InboxRejected, ports.InboxDuplicate, ports.InboxNoop:
		default:
			return fmt.Errorf("memory store FinishInbox: message %s: invalid status %q", r.MessageID, r.Status)
		}
		if !t.inbox.has(inboxKey{group, r.MessageID}) {
			return fmt.Errorf("memory store FinishInbox: message %s of group %s was never claimed: %w", r.MessageID, group, ports.ErrNotFound)
		}
	}
	for _, r := range results {
		k := inboxKey{group, r.MessageID}
		row, _ := t.inbox.get(k)
		row.Status, row.Detail, row.UpdatedAt = r.Status, r.Detail, t.now
		t.inbox.put(k, row)
	}
	return after
}

// InboxStatusOf returns the status of the group's row for messageID
// ("PROCESSING" while claimed and unfinished), or ports.ErrNotFound.
func (t *tx) InboxStatusOf(ctx context.Context, group, messageID string) (ports.InboxStatus, error) {
	after, err := t.enter(ctx, "InboxStatusOf")
	if err != nil {
		return "", err
	}
	defer t.mu.Unlock()
	if after != nil {
		return "", after
	}
	row, ok := t.inbox.get(inboxKey{group, messageID})
	if !ok {
		return "", fmt.Errorf("inbox %s/%s: %w", group, messageID, ports.ErrNotFound)
	}
	return row.Status, nil
}

// outcomeProcessing is the status of a claimed, undecided reservation.
const outcomeProcessing = "PROCESSING"

// ClaimReservations inserts a PROCESSING row per reservation without one
// (committed or earlier in this transaction) and returns their ids in
// input order; repeated ids count once.
func (t *tx) ClaimReservations(ctx context.Context, claims []ports.ReservationClaim) ([]string, error) {
	after, err := t.enter(ctx, "ClaimReservations")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	var claimed []string
	for _, c := range claims {
		if t.outcomes.has(c.ReservationID) {
			continue
		}
		t.outcomes.put(c.ReservationID, OutcomeRow{Claim: c, Status: outcomeProcessing, ClaimedAt: t.now, seq: t.s.nextRowSeq()})
		claimed = append(claimed, c.ReservationID)
	}
	if after != nil {
		return nil, after
	}
	return claimed, nil
}

// FinishReservations records the outcome of claimed reservations, all or
// nothing. An outcome other than ORDERED or REJECTED fails the call, and
// so does a reservation without a row (never claimed), with an error
// matching ports.ErrNotFound.
func (t *tx) FinishReservations(ctx context.Context, outcomes []ports.ReservationOutcome) error {
	after, err := t.enter(ctx, "FinishReservations")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, o := range outcomes {
		if o.Outcome != ports.OutcomeOrdered && o.Outcome != ports.OutcomeRejected {
			return fmt.Errorf("memory store FinishReservations: reservation %s: invalid outcome %q", o.ReservationID, o.Outcome)
		}
		if !t.outcomes.has(o.ReservationID) {
			return fmt.Errorf("memory store FinishReservations: reservation %s was never claimed: %w", o.ReservationID, ports.ErrNotFound)
		}
	}
	for _, o := range outcomes {
		row, _ := t.outcomes.get(o.ReservationID)
		row.Status, row.Reason = o.Outcome, o.Reason
		t.outcomes.put(o.ReservationID, row)
	}
	return after
}
