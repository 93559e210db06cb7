package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// SKU names one activity SKU.
type SKU struct {
	ActivityID int64
	SKUID      int64
}

// Store is the in-memory PostgreSQL: it implements ports.UnitOfWork and
// ports.OrderQueries, and the ports.Tx it hands to InTx callbacks
// implements every store of ports.Tx (ports.ReservationOutcomeStore,
// ports.DeadLetterStore and ports.AuditStore included).
//
// Transactions are serialized: InTx waits (respecting its context) until no
// other transaction runs, so what PostgreSQL does by waiting on row locks
// and unique-index entries of a concurrent transaction happens here by
// waiting for the whole transaction. A transaction writes to a private
// layer over the committed state; the layer is committed atomically when
// the callback returns nil and discarded when it returns an error or
// panics (the panic propagates). Readers outside transactions
// (GetOrderView, Snapshot) see committed state only and never wait for a
// running transaction.
//
// The store enforces the uniqueness rules of the SQL schema (see each Tx
// method). Sequences (outbox, dead-letter and audit ids) are not rolled
// back, as in PostgreSQL.
// Safe for concurrent use.
type Store struct {
	clock  ports.Clock
	sem    chan struct{} // held by the running transaction
	faults *faults

	txSeq         atomic.Uint64
	outboxSeq     atomic.Int64
	rowSeq        atomic.Int64
	deadLetterSeq atomic.Int64
	auditSeq      atomic.Int64

	mu sync.RWMutex // guards the committed tables against readers
	t  tables
}

// tables is the committed state.
type tables struct {
	inbox       map[inboxKey]InboxRow
	orders      map[string]order.Snapshot
	ordersByRsv map[string]string
	activeOrder map[userSKU]string
	events      map[string][]order.Event
	ledger      map[ledgerKey]LedgerRow
	outbox      map[int64]OutboxRow
	unpublished map[int64]struct{}
	rejections  map[string]RejectionRow
	rejByRsv    map[string]string
	quarantine  map[quarantineKey]QuarantineRow
	activities  map[SKU]ports.Activity
	stock       map[SKU]int64
	outcomes    map[string]OutcomeRow
	deadLetters map[int64]DeadLetterRow
	dlByMessage map[deadLetterKey]int64
	dlAudit     map[int64]AuditRow
}

type (
	inboxKey      struct{ group, messageID string }
	userSKU       struct{ activityID, skuID, userID int64 }
	ledgerKey     struct{ reservationID, reason string }
	quarantineKey struct{ group, brokerMessageID string }
	deadLetterKey struct{ group, messageID string }
	// txMarker marks contexts passed to InTx callbacks of one Store.
	txMarker struct{ s *Store }
)

var (
	_ ports.UnitOfWork   = (*Store)(nil)
	_ ports.OrderQueries = (*Store)(nil)
)

// Method names accepted by Store.Inject and Store.FailOn: "Begin" and
// "Commit" (of InTx; a Begin fault always fails before the transaction
// starts), GetOrderView, and every method of ports.Tx and
// ports.ReservationOutcomeStore by its Go name ("ClaimInbox", ...).
var storeMethods = []string{
	"Begin", "Commit", "GetOrderView", "Now",
	"ClaimInbox", "FinishInbox", "InboxStatusOf",
	"InsertOrders", "AppendEvents", "LoadOrderEvents", "UpdateOrders", "OrdersByReservation",
	"TakeStock", "ReturnStock", "AppendLedger",
	"AppendOutbox", "ClaimOutbox", "MarkPublished", "DeferOutbox", "PruneOutbox",
	"RecordRejections", "Quarantine", "CreateActivity", "GetActivity",
	"ClaimReservations", "FinishReservations",
	"RecordDeadLetter", "ListDeadLetters", "GetDeadLetter", "MarkReplayed", "MarkResolved",
	"AppendAudit", "DeadLetterStats",
	"AuditStock", "LiveHolders", "ReservationStates", "ExpiredUnpaidOrders", "OrderStreams", "Rejections", "ListActivities",
}

// NewStore returns an empty store whose transactions read the time from
// clock (Tx.Now). A nil clock panics: tests must say what time it is.
func NewStore(clock ports.Clock) *Store {
	if clock == nil {
		panic("memory.NewStore: nil clock")
	}
	return &Store{
		clock:  clock,
		sem:    make(chan struct{}, 1),
		faults: newFaults("store", storeMethods...),
		t: tables{
			inbox:       map[inboxKey]InboxRow{},
			orders:      map[string]order.Snapshot{},
			ordersByRsv: map[string]string{},
			activeOrder: map[userSKU]string{},
			events:      map[string][]order.Event{},
			ledger:      map[ledgerKey]LedgerRow{},
			outbox:      map[int64]OutboxRow{},
			unpublished: map[int64]struct{}{},
			rejections:  map[string]RejectionRow{},
			rejByRsv:    map[string]string{},
			quarantine:  map[quarantineKey]QuarantineRow{},
			activities:  map[SKU]ports.Activity{},
			stock:       map[SKU]int64{},
			outcomes:    map[string]OutcomeRow{},
			deadLetters: map[int64]DeadLetterRow{},
			dlByMessage: map[deadLetterKey]int64{},
			dlAudit:     map[int64]AuditRow{},
		},
	}
}

// errNestedTx is returned by InTx when called from inside a callback of
// the same Store: with serialized transactions it would wait forever.
var errNestedTx = errors.New("memory store: InTx called inside a transaction of the same store (would deadlock)")

// InTx runs fn in a transaction. It waits until no other transaction runs
// (or ctx ends), hands fn a Tx whose Now is the clock's time at this point,
// and commits the transaction's writes atomically when fn returns nil;
// InTx then returns the commit's error (nil, a canceled context, or an
// injected "Commit" fault). When fn returns an error, InTx discards the
// writes and returns fn's error unchanged; when fn panics, the writes are
// discarded and the panic propagates. A Tx used after InTx returned fails
// every call. Calling InTx from inside fn (with fn's ctx) fails at once
// instead of deadlocking.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx ports.Tx) error) error {
	if ctx.Value(txMarker{s}) != nil {
		return errNestedTx
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: begin transaction: %w", err)
	}
	if before, _ := s.faults.hit("Begin"); before != nil {
		return before
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("memory store: begin transaction: %w", ctx.Err())
	}
	defer func() { <-s.sem }()
	t := s.begin()
	defer t.finish()
	if err := fn(context.WithValue(ctx, txMarker{s}, true), t); err != nil {
		return err
	}
	t.finish()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: commit: %w", err)
	}
	before, after := s.faults.hit("Commit")
	if before != nil {
		return before
	}
	s.mu.Lock()
	t.commit()
	s.mu.Unlock()
	return after
}

// Inject arms a fault on one of the store's methods (test facility; see
// storeMethods for the names). A Fault with a nil Err disarms the method.
// Unknown method names panic.
func (s *Store) Inject(method string, f Fault) { s.faults.set(method, f) }

// FailOn makes every call of method fail with err, before taking effect,
// until cleared (test facility). A nil err clears it.
func (s *Store) FailOn(method string, err error) { s.Inject(method, Fault{Err: err}) }

// FailNextCommit makes the next commit fail with err and roll back (test
// facility): InTx returns err although fn succeeded, and nothing persists.
func (s *Store) FailNextCommit(err error) { s.Inject("Commit", Fault{Err: err, Times: 1}) }

// LoseNextCommitAck makes the next commit succeed and InTx still return err
// (test facility): the outcome a client sees when the connection breaks
// after COMMIT was sent.
func (s *Store) LoseNextCommitAck(err error) {
	s.Inject("Commit", Fault{Err: err, AfterEffect: true, Times: 1})
}

// ClearFaults disarms every injected fault (test facility).
func (s *Store) ClearFaults() { s.faults.clear() }

// now is the clock's time at PostgreSQL's precision.
func (s *Store) now() time.Time { return pgTime(s.clock.Now()) }

// pgTime returns t in UTC at microsecond precision, as PostgreSQL stores a
// timestamptz.
func pgTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// nextRowSeq numbers rows for Snapshot's ordering.
func (s *Store) nextRowSeq() int64 { return s.rowSeq.Add(1) }
