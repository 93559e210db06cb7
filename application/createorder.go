package application

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// CreateOrders is the order-create consumer's handler
// (CG_SECKILL_ORDER_CREATE_PG_V1). It turns OrderCreateRequested messages
// into orders with at most one business effect per message id (I3), per
// reservation, and per (activity, SKU, user) (I2), never exceeding the
// final stock (I1).
//
// A received batch is processed in ONE PostgreSQL transaction that claims
// the inbox rows, decides each reservation exactly once (expired ->
// rejected, no final stock -> rejected, user already holds an order ->
// rejected, otherwise created), writes order events, projections, ledger,
// outbox rows (domain event, payment-timeout delay message, FIFO state
// change; or, for a rejection, the compensation task and a REJECTED state
// change) and finishes the inbox rows. Only after COMMIT are the messages
// acknowledged. If the batch transaction fails, every message is retried
// alone so one bad message cannot fail or double the others.
//
// Classification (spec 14.4): success and already-processed are ACKed;
// business rejects are recorded with their compensation, committed and
// ACKed; malformed messages (undecodable, unsupported schema, invalid
// fields, unknown activity) are quarantined after one attempt and ACKed;
// transient failures roll back and are retried after a backoff; unknown
// failures are retried the same way, bounded by the group's retry budget
// after which the broker moves them to the dead-letter queue.
type CreateOrders struct {
	uow          ports.UnitOfWork
	reservations ports.Reservations
	activities   *Activities
	fp           ports.Failpoints
	log          *slog.Logger
	group        string
	policy       CompensationPolicy
}

// NewCreateOrders wires the handler for consumer group group.
func NewCreateOrders(uow ports.UnitOfWork, reservations ports.Reservations, activities *Activities,
	fp ports.Failpoints, log *slog.Logger, group string, policy CompensationPolicy) *CreateOrders {
	return &CreateOrders{uow: uow, reservations: reservations, activities: activities, fp: fp,
		log: log.With("consumer_group", group), group: group, policy: policy}
}

// createItem is one decoded message on its way through the transaction.
type createItem struct {
	idx      int // position in the received batch
	delivery ports.Delivery
	msg      message.OrderCreateRequested
	activity ports.Activity
	outcome  createOutcome
	reason   reservation.ReleaseReason // for outcomeRejected
	order    *order.Order              // for outcomeCreated
}

// createOutcome is what the batch transaction decided for one message.
type createOutcome int

// The outcomes. outcomeUndecided only lives inside the transaction, between
// claiming a reservation and deciding it; after a committed transaction
// every item is created, rejected or a duplicate.
const (
	outcomeUndecided createOutcome = iota
	outcomeDuplicate
	outcomeCreated
	outcomeRejected
)

// String returns the label the decision, the logs and the metrics carry:
// created, duplicate or rejected.
func (o createOutcome) String() string {
	switch o {
	case outcomeDuplicate:
		return "duplicate"
	case outcomeCreated:
		return "created"
	case outcomeRejected:
		return "rejected"
	}
	return "undecided"
}

// HandleBatch implements ports.BatchHandler.
func (h *CreateOrders) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	decisions := make([]ports.Decision, len(ds))
	var items []*createItem
	for i, d := range ds {
		it, decision, ok := h.decode(ctx, i, d)
		if !ok {
			decisions[i] = decision
			continue
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return decisions
	}
	start := time.Now()
	err := h.process(ctx, items)
	if err != nil && len(items) > 1 {
		h.log.WarnContext(ctx, "batch transaction failed, retrying one by one", "batch", len(items), "error", err)
		for _, it := range items {
			start := time.Now()
			err := h.process(ctx, []*createItem{it})
			decisions[it.idx] = h.finish(ctx, []*createItem{it}, err, time.Since(start))[0]
		}
		return decisions
	}
	for i, d := range h.finish(ctx, items, err, time.Since(start)) {
		decisions[items[i].idx] = d
	}
	return decisions
}

// decode parses and validates one delivery; a message that can never be
// processed is quarantined (and then acknowledged).
func (h *CreateOrders) decode(ctx context.Context, i int, d ports.Delivery) (*createItem, ports.Decision, bool) {
	m, err := message.DecodeOrderCreateRequested(d.Body)
	if err != nil {
		return nil, h.quarantine(ctx, d, m.MessageID, message.Class(err), err), false
	}
	act, err := h.activities.Get(ctx, m.ActivityID, m.SKUID)
	if errors.Is(err, ports.ErrNotFound) {
		return nil, h.quarantine(ctx, d, m.MessageID, "UNKNOWN_ACTIVITY", err), false
	}
	if err != nil {
		return nil, retry(d, "transient"), false
	}
	return &createItem{idx: i, delivery: d, msg: m, activity: act}, ports.Decision{}, true
}

func (h *CreateOrders) quarantine(ctx context.Context, d ports.Delivery, messageID, class string, cause error) ports.Decision {
	return quarantine(ctx, h.uow, h.log, h.group, ports.TopicOrderCreate, d, messageID, class, cause)
}

// process runs the transaction for items and fills in their outcomes. It
// returns the transaction's error, after which no outcome is valid.
func (h *CreateOrders) process(ctx context.Context, items []*createItem) error {
	return h.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		for _, it := range items {
			it.outcome, it.reason, it.order = outcomeDuplicate, "", nil
		}
		fresh, decided, err := h.claim(ctx, tx, items)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		var candidates []*createItem
		for _, it := range fresh {
			if reservation.Expired(it.msg.ReservationValidUntil, now) {
				it.outcome, it.reason = outcomeRejected, reservation.ReasonExpired
				continue
			}
			candidates = append(candidates, it)
		}
		if err := h.takeStock(ctx, tx, candidates); err != nil {
			return err
		}
		if err := h.createOrders(ctx, tx, candidates, now); err != nil {
			return err
		}
		if err := h.record(ctx, tx, fresh, decided, now); err != nil {
			return err
		}
		return ports.Inject(ctx, h.fp, ports.FailConsumerInTx)
	})
}

// claim inserts the inbox rows and decides which reservations this
// transaction may act on (fresh); everything else stays a duplicate:
// messages the group already handled, and new messages whose reservation
// was already decided under another message id (decided: their inbox rows
// are finished as DUPLICATE).
func (h *CreateOrders) claim(ctx context.Context, tx ports.Tx, items []*createItem) (fresh, decided []*createItem, err error) {
	entries := make([]ports.InboxEntry, len(items))
	for i, it := range items {
		entries[i] = ports.InboxEntry{MessageID: it.msg.MessageID, Topic: it.delivery.Topic,
			ReservationID: it.msg.ReservationID, OrderID: it.msg.OrderID, DeliveryAttempt: it.delivery.DeliveryAttempt}
	}
	newIDs, err := tx.ClaimInbox(ctx, h.group, entries)
	if err != nil {
		return nil, nil, fmt.Errorf("claim inbox: %w", err)
	}
	isNew := set(newIDs)
	var claims []ports.ReservationClaim
	var byMessage []*createItem
	for _, it := range items {
		if isNew[it.msg.MessageID] {
			isNew[it.msg.MessageID] = false // a message repeated in one batch counts once
			claims = append(claims, ports.ReservationClaim{ReservationID: it.msg.ReservationID,
				OrderID: it.msg.OrderID, MessageID: it.msg.MessageID})
			byMessage = append(byMessage, it)
		}
	}
	if len(claims) == 0 {
		return nil, nil, nil
	}
	claimed, err := tx.ClaimReservations(ctx, claims)
	if err != nil {
		return nil, nil, fmt.Errorf("claim reservations: %w", err)
	}
	isClaimed := set(claimed)
	for _, it := range byMessage {
		if isClaimed[it.msg.ReservationID] {
			isClaimed[it.msg.ReservationID] = false
			it.outcome = outcomeUndecided // decided below
			fresh = append(fresh, it)
			continue
		}
		decided = append(decided, it)
	}
	return fresh, decided, nil
}

// takeStock takes the final stock per activity SKU; candidates beyond it
// are rejected with NO_FINAL_STOCK (the Redis gate should make this rare:
// it guards I1 if Redis and PostgreSQL ever disagree).
func (h *CreateOrders) takeStock(ctx context.Context, tx ports.Tx, candidates []*createItem) error {
	for _, g := range bySKU(candidates) {
		granted, err := tx.TakeStock(ctx, g.activityID, g.skuID, int64(len(g.items)))
		if err != nil {
			return fmt.Errorf("take stock: %w", err)
		}
		for i, it := range g.items {
			if int64(i) >= granted {
				it.outcome, it.reason = outcomeRejected, reservation.ReasonNoFinalStock
			}
		}
	}
	return nil
}

// createOrders inserts the order projections of the candidates that got
// stock; an insert refused by the one-valid-order-per-user rule is
// rejected and its unit returned.
func (h *CreateOrders) createOrders(ctx context.Context, tx ports.Tx, candidates []*createItem, now time.Time) error {
	var pending []*createItem
	var snaps []order.Snapshot
	for _, it := range candidates {
		if it.outcome != outcomeUndecided {
			continue
		}
		o, err := order.Create(order.NewOrder{
			OrderID: it.msg.OrderID, ReservationID: it.msg.ReservationID, MessageID: it.msg.MessageID,
			ActivityID: it.msg.ActivityID, SKUID: it.msg.SKUID, UserID: it.msg.UserID, Quantity: it.msg.Quantity,
			ReservedAt: it.msg.ReservationCreatedAt, PaymentTimeout: it.activity.PaymentTimeout,
			UnitPrice: it.activity.UnitPrice, Currency: it.activity.Currency,
		}, now)
		if err != nil {
			return fmt.Errorf("create order %s: %w", it.msg.OrderID, err)
		}
		it.order = o
		pending = append(pending, it)
		snaps = append(snaps, o.Snapshot())
	}
	if len(snaps) == 0 {
		return nil
	}
	inserted, err := tx.InsertOrders(ctx, snaps)
	if err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	var refused []*createItem
	for i, it := range pending {
		if inserted[i] {
			it.outcome = outcomeCreated
			continue
		}
		it.outcome, it.reason, it.order = outcomeRejected, reservation.ReasonDuplicateOrder, nil
		refused = append(refused, it)
	}
	for _, g := range bySKU(refused) {
		if err := tx.ReturnStock(ctx, g.activityID, g.skuID, int64(len(g.items))); err != nil {
			return fmt.Errorf("return stock: %w", err)
		}
	}
	return nil
}

// record collects the rows of the items this transaction decided (events,
// ledger, outbox, rejections, reservation outcomes, inbox results) and of
// the messages whose reservation was decided before (their inbox rows are
// finished as duplicates), then writes them.
func (h *CreateOrders) record(ctx context.Context, tx ports.Tx, fresh, decidedBefore []*createItem, now time.Time) error {
	var w createWrites
	for _, it := range decidedBefore {
		w.duplicate(it.msg)
	}
	for _, it := range fresh {
		var err error
		switch it.outcome {
		case outcomeCreated:
			err = w.created(it.msg, it.order, now)
		case outcomeRejected:
			err = w.rejected(it.msg, it.reason, h.policy, now)
		}
		if err != nil {
			return err
		}
	}
	return w.write(ctx, tx, h.group)
}

// finish turns outcomes into decisions after the transaction: on success
// the Redis reservations of created orders are marked ORDERED (best
// effort) and every message is acknowledged; on failure nothing is.
func (h *CreateOrders) finish(ctx context.Context, items []*createItem, txErr error, txLatency time.Duration) []ports.Decision {
	out := make([]ports.Decision, len(items))
	if txErr != nil {
		for i, it := range items {
			out[i] = retry(it.delivery, classify(txErr))
			h.log.WarnContext(ctx, "order-create transaction failed", "message_id", it.msg.MessageID,
				"reservation_id", it.msg.ReservationID, "order_id", it.msg.OrderID,
				"delivery_attempt", it.delivery.DeliveryAttempt, "error_class", classify(txErr), "error", txErr)
		}
		return out
	}
	var ordered []ports.ReservationRef
	for _, it := range items {
		if it.outcome == outcomeCreated {
			ordered = append(ordered, ports.ReservationRef{ActivityID: it.msg.ActivityID, SKUID: it.msg.SKUID,
				ReservationID: it.msg.ReservationID, UserID: it.msg.UserID})
		}
	}
	if len(ordered) > 0 {
		if err := h.reservations.MarkOrdered(context.WithoutCancel(ctx), ordered); err != nil {
			h.log.WarnContext(ctx, "redis write-back failed; reconciliation repairs it", "orders", len(ordered), "error", err)
		}
	}
	if err := ports.Inject(ctx, h.fp, ports.FailConsumerAfterCommit); err != nil {
		for i, it := range items {
			out[i] = retry(it.delivery, "failpoint")
		}
		return out
	}
	for i, it := range items {
		inbox, effect := "inserted", it.outcome.String()
		if it.outcome == outcomeDuplicate {
			inbox, effect = "duplicate", "none"
		}
		// The consumer runner logs the decision with these fields (one
		// line per order).
		out[i] = ports.Decision{Ack: true, Outcome: it.outcome.String(), Reason: string(it.reason),
			Inbox: inbox, Effect: effect, TxLatency: txLatency}
	}
	return out
}

// skuGroup is the items of one activity SKU.
type skuGroup struct {
	activityID, skuID int64
	items             []*createItem
}

// bySKU groups items by activity SKU, in ascending (activity, sku) order
// so that concurrent transactions lock stock rows in the same order.
func bySKU(items []*createItem) []skuGroup {
	var groups []skuGroup
	for _, it := range items {
		i := slices.IndexFunc(groups, func(g skuGroup) bool {
			return g.activityID == it.msg.ActivityID && g.skuID == it.msg.SKUID
		})
		if i < 0 {
			groups = append(groups, skuGroup{activityID: it.msg.ActivityID, skuID: it.msg.SKUID})
			i = len(groups) - 1
		}
		groups[i].items = append(groups[i].items, it)
	}
	slices.SortFunc(groups, func(a, b skuGroup) int {
		return cmp.Or(cmp.Compare(a.activityID, b.activityID), cmp.Compare(a.skuID, b.skuID))
	})
	return groups
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
