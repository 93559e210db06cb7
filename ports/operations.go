package ports

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seckill-dev/seckill/domain/order"
)

// DeadLetterRecord is a message that exhausted a consumer group's retries,
// as read from the group's dead-letter topic.
type DeadLetterRecord struct {
	ConsumerGroup string
	// Topic is the logical topic the message was originally sent to.
	Topic           Topic
	MessageID       string
	BrokerMessageID string
	Tag             string
	Keys            []string
	MessageGroup    string
	ErrorClass      string
	LastError       string
	Attempts        int32
	Body            []byte
	Properties      map[string]string
	SeenAt          time.Time
}

// StoredDeadLetter is a dead letter with its payload, for replay.
type StoredDeadLetter struct {
	DeadLetter
	Record DeadLetterRecord
}

// DeadLetterStats summarizes open dead letters.
type DeadLetterStats struct {
	Open         int64
	OldestOpenAt time.Time // zero when none
}

// DeadLetterStore keeps dead letters. Operator actions on them are
// audited through AdminAuditStore.
type DeadLetterStore interface {
	// RecordDeadLetter stores r keyed by (consumer group, message id): the
	// first arrival inserts an OPEN row; a later arrival of the same message
	// (for example a replay that failed again) updates last_seen_at,
	// attempts and last error and reopens it. It returns the row id and
	// whether the row is new.
	RecordDeadLetter(ctx context.Context, r DeadLetterRecord) (int64, bool, error)
	// ListDeadLetters returns up to limit dead letters with id < beforeID
	// (0 = from the newest), newest first, optionally of one group.
	ListDeadLetters(ctx context.Context, group string, limit int, beforeID int64) ([]DeadLetter, error)
	// GetDeadLetter returns a dead letter with its payload, locked for
	// update until the transaction ends, or ErrNotFound.
	GetDeadLetter(ctx context.Context, id int64) (StoredDeadLetter, error)
	// MarkReplayed sets status REPLAYED, increments replay_count and
	// returns the new count.
	MarkReplayed(ctx context.Context, id int64) (int32, error)
	// MarkResolved sets status RESOLVED (nothing left to replay).
	MarkResolved(ctx context.Context, id int64) error
	// DeadLetterStats counts open dead letters and finds the oldest.
	DeadLetterStats(ctx context.Context) (DeadLetterStats, error)
}

// StockAudit is PostgreSQL's side of one activity SKU's books.
type StockAudit struct {
	InitialStock      int64
	PGFinalStock      int64
	NonCanceledOrders int64
	// OrderedHeld are the given held reservations that have a non-canceled
	// order.
	OrderedHeld []string
	// ReleasedHeld are the given held reservations whose stock PostgreSQL
	// released (rejected, or order canceled): their Redis release is in
	// flight.
	ReleasedHeld []string
}

// ReservationState is PostgreSQL's knowledge of a reservation.
type ReservationState struct {
	ReservationID string
	// Outcome is "" (undecided), ORDERED or REJECTED.
	Outcome string
	// Reason is the rejection reason when Outcome is REJECTED.
	Reason string
	// OrderStatus is the order's status when Outcome is ORDERED.
	OrderStatus order.Status
}

// StaleRelease is a reservation PostgreSQL released a while ago
// (AuditStore.StaleReleases) that Redis still holds: its release task was
// lost on the way (a broker that handed it to a consumer that died, for
// example), so the reconciler releases it.
type StaleRelease struct {
	ReservationID string
	// UserID is the order's or the rejection's user (0 when PostgreSQL
	// has only a REJECTED outcome).
	UserID int64
	// Canceled: the order was canceled; otherwise the reservation was
	// rejected for Reason.
	Canceled bool
	Reason   string
	// ReleasedAt is when PostgreSQL gave the unit back.
	ReleasedAt time.Time
}

// AuditStore answers the reconciler's and auditor's questions and keeps
// the operators' audit trail (AdminAuditStore).
type AuditStore interface {
	AdminAuditStore

	// AuditStock measures the PostgreSQL terms of invariant I6 for one
	// activity SKU, classifying the given Redis-held reservations.
	AuditStock(ctx context.Context, activityID, skuID int64, held []string) (StockAudit, error)
	// LiveHolders returns the user and reservation of every non-canceled
	// order of one activity SKU (StockBooks rebuild).
	LiveHolders(ctx context.Context, activityID, skuID int64) ([]Holder, error)
	// CanceledReservations returns the reservation ids of one activity
	// SKU's canceled orders, in id order. PostgreSQL gave their units
	// back, so a rebuild of the Redis books (which counts them available)
	// marks their Redis reservations released: a release still in flight
	// for one of them then gives nothing back a second time.
	CanceledReservations(ctx context.Context, activityID, skuID int64) ([]string, error)
	// ReservationStates returns what PostgreSQL knows of each reservation
	// id (every input id appears in the result).
	ReservationStates(ctx context.Context, reservationIDs []string) ([]ReservationState, error)
	// StaleReleases returns, of the given Redis-held reservation ids, those
	// whose unit PostgreSQL gave back before cutoff: the order was canceled
	// (canceled_at), or the reservation was rejected (a rejection, or a
	// REJECTED outcome). Input order, each id once; ids PostgreSQL keeps
	// (a live order, undecided) are left out.
	StaleReleases(ctx context.Context, held []string, cutoff time.Time) ([]StaleRelease, error)
	// ExpiredUnpaidOrders returns up to limit orders still CREATED or
	// PAYING whose expires_at is before cutoff.
	ExpiredUnpaidOrders(ctx context.Context, cutoff time.Time, limit int) ([]string, error)
	// OrderStreams returns the event streams of up to limit orders with
	// ids greater than afterOrderID, in id order (projection rebuild).
	OrderStreams(ctx context.Context, afterOrderID string, limit int) ([][]order.Event, error)
	// Rejections returns up to limit rejections with order ids greater
	// than afterOrderID, in id order.
	Rejections(ctx context.Context, afterOrderID string, limit int) ([]Rejection, error)
	// ListActivities returns every activity, by (activity_id, sku_id),
	// with its operator state (Paused, ClosedAt, the moved EndsAt): the
	// stock recovery seeds a rebuilt Redis from it.
	ListActivities(ctx context.Context) ([]Activity, error)
}

// Audited actions (AuditEntry.Action).
const (
	// AuditCreateActivity: AdminService.CreateActivity (the API, and the
	// demo activity of `seckill serve --seed-demo`).
	AuditCreateActivity = "CREATE_ACTIVITY"
	// AuditDLQReplay: AdminService.ReplayDeadLetter (the API and
	// `seckill dlq replay`); the target is DeadLetterTarget(id).
	AuditDLQReplay = "DLQ_REPLAY"
	// AuditReconcile: one reconciliation pass (`seckill reconcile` or the
	// periodic reconciler).
	AuditReconcile = "RECONCILE"
	// AuditProjectionRebuild: `seckill projection rebuild`.
	AuditProjectionRebuild = "PROJECTION_REBUILD"
)

// Audit outcomes shared by several actions (AuditEntry.Outcome). A replay
// records its own outcomes (REPLAYED, SKIPPED_ALREADY_APPLIED, REFUSED,
// FAILED) besides AuditNotFound.
const (
	// AuditOK: the action ran to its end.
	AuditOK = "OK"
	// AuditFailed: the action stopped on an error (params hold it).
	AuditFailed = "FAILED"
	// AuditNotFound: the target does not exist; nothing changed.
	AuditNotFound = "NOT_FOUND"
	// AuditCreated: a new activity was stored and seeded.
	AuditCreated = "CREATED"
	// AuditUnchanged: the activity existed with equal settings; the call
	// only made sure it is seeded.
	AuditUnchanged = "UNCHANGED"
	// AuditAlreadyExists: the activity exists with other settings; nothing
	// changed.
	AuditAlreadyExists = "ALREADY_EXISTS"
)

// Actors of the service's own actions (AuditEntry.Actor). An operator is
// UserActor(id) of a verified admin token.
const (
	// ActorSeedDemo creates the demo activity of `seckill serve --seed-demo`.
	ActorSeedDemo = "system:seed-demo"
	// ActorReconciler runs the periodic reconciliation passes.
	ActorReconciler = "system:reconciler"
)

// UserActor returns the actor naming the holder of a verified token of
// user userID: "user:<id>".
func UserActor(userID int64) string { return "user:" + strconv.FormatInt(userID, 10) }

// DeadLetterTarget returns the audit target of dead letter id:
// "dead_letter:<id>".
func DeadLetterTarget(id int64) string { return "dead_letter:" + strconv.FormatInt(id, 10) }

// ActivityTarget returns the audit target of an activity SKU:
// "activity:<activity_id>/<sku_id>".
func ActivityTarget(activityID, skuID int64) string {
	return "activity:" + strconv.FormatInt(activityID, 10) + "/" + strconv.FormatInt(skuID, 10)
}

// AuditEntry is one row of the admin audit trail: who did what to which
// target, with which parameters and result. Every state-changing admin
// call and CLI action appends exactly one, in the transaction of the
// action when it has one.
type AuditEntry struct {
	// Actor names who acted: UserActor(id) for the holder of a verified
	// admin token, or a "system:..." actor. Required.
	Actor string
	// Action is one of the Audit* actions. Required.
	Action string
	// Target names what the action touched (ActivityTarget,
	// DeadLetterTarget); empty for actions on the whole service.
	Target string
	// Params holds the action's parameters and a summary of its result;
	// it must encode as JSON (see ParamsJSON). nil stores an empty object.
	Params map[string]any
	// Outcome is the action's result (AuditOK, AuditFailed, ...).
	// Required.
	Outcome string
}

// Validate checks what every store requires of an entry: a non-empty
// actor, action and outcome, and valid UTF-8 without NUL characters in
// every text field (PostgreSQL text cannot hold them).
func (e AuditEntry) Validate() error {
	if e.Actor == "" || e.Action == "" || e.Outcome == "" {
		return fmt.Errorf("audit entry %q on %q: actor, action and outcome are required", e.Action, e.Target)
	}
	for _, f := range [...]struct{ name, v string }{
		{"actor", e.Actor}, {"action", e.Action}, {"target", e.Target}, {"outcome", e.Outcome},
	} {
		if !utf8Text(f.v) {
			return fmt.Errorf("audit entry %q: %s must be valid UTF-8 without NUL characters", e.Action, f.name)
		}
	}
	return nil
}

func utf8Text(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// ParamsJSON encodes Params as every store keeps them: a JSON object (nil
// as {}), with each NUL character in keys and strings replaced by U+FFFD
// (PostgreSQL's jsonb cannot hold it). Values that do not encode as JSON
// fail.
func (e AuditEntry) ParamsJSON() ([]byte, error) {
	if len(e.Params) == 0 {
		return []byte("{}"), nil
	}
	raw, err := json.Marshal(e.Params)
	if err != nil {
		return nil, fmt.Errorf("audit entry %q: encode params: %w", e.Action, err)
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers as written (no float64 rounding)
	if err := dec.Decode(&generic); err != nil {
		return nil, fmt.Errorf("audit entry %q: decode params: %w", e.Action, err)
	}
	out, err := json.Marshal(withoutNUL(generic))
	if err != nil {
		return nil, fmt.Errorf("audit entry %q: encode params: %w", e.Action, err)
	}
	return out, nil
}

// withoutNUL replaces NUL characters in the keys and strings of a decoded
// JSON value.
func withoutNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "\uFFFD")
	case []any:
		for i := range x {
			x[i] = withoutNUL(x[i])
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			out[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(val)
		}
		return out
	}
	return v
}

// AuditRecord is a stored AuditEntry. Its Params read back as
// encoding/json decodes ParamsJSON into a map[string]any (numbers as
// float64), never nil.
type AuditRecord struct {
	ID int64
	AuditEntry
	// At is the time of the appending transaction (Tx.Now).
	At time.Time
}

// AdminAuditStore keeps the admin audit trail (admin_audit): one row per
// operator or system action, written in the transaction of the action, so
// an action commits with its audit or not at all.
type AdminAuditStore interface {
	// AppendAudit stores e under a new id (ids increase in the order of
	// the calls; an id is never reused, even after a rollback) with At =
	// the transaction's Now. An entry failing AuditEntry.Validate or
	// AuditEntry.ParamsJSON fails the call and stores nothing.
	AppendAudit(ctx context.Context, e AuditEntry) error
	// ListAudit returns up to limit audit records with id > afterID, in
	// id order: those committed and those this transaction appended
	// (none when limit <= 0).
	ListAudit(ctx context.Context, afterID int64, limit int) ([]AuditRecord, error)
}
