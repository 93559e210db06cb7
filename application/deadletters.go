package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Dead-letter replay outcomes.
const (
	ReplayReplayed       = "REPLAYED"
	ReplaySkippedApplied = "SKIPPED_ALREADY_APPLIED"
	ReplayRefused        = "REFUSED"
	ReplayFailed         = "FAILED"
)

// DeadLetterConfig tunes dead-letter handling.
type DeadLetterConfig struct {
	// ReplayCap is the maximum number of replays of one dead letter.
	ReplayCap int32
	// Topics maps each consumer group to the logical topic it consumes;
	// replays go back to that topic.
	Topics map[string]ports.Topic
	// CreateGroup, CompensateGroup name the groups whose replays need
	// special pre-checks.
	CreateGroup, CompensateGroup string
}

// DeadLetters closes the dead-letter loop (spec 17.4, 25.2): every message
// that exhausted a group's retries, and every poison message quarantined
// after one attempt, is stored with its group, topic, message id, error
// class, last error and attempts, logged as an alert and counted; an
// operator lists them and replays one after fixing the cause. A replay
// keeps the original message id (so the inbox of the group turns a replay
// of committed work into a no-op), adds replay_id and replay_count, is
// capped, passes the pre-checks (inbox state, reservation already
// decided or compensated, schema still supported, activity known) and is
// audited with who, when, why and the outcome.
type DeadLetters struct {
	uow          ports.UnitOfWork
	publisher    ports.Publisher
	reservations ports.Reservations
	ids          ports.IDGenerator
	metrics      ports.Metrics
	log          *slog.Logger
	cfg          DeadLetterConfig
}

// NewDeadLetters wires dead-letter handling.
func NewDeadLetters(uow ports.UnitOfWork, publisher ports.Publisher, reservations ports.Reservations,
	ids ports.IDGenerator, metrics ports.Metrics, log *slog.Logger, cfg DeadLetterConfig) *DeadLetters {
	return &DeadLetters{uow: uow, publisher: publisher, reservations: reservations, ids: ids, metrics: metrics,
		log: log.With("component", "dlq"), cfg: cfg}
}

// Reader returns the handler of the dead-letter topics; origin (from the
// broker adapter) tells a dead-letter delivery's source group, or false for
// a delivery that is not a dead letter.
func (dl *DeadLetters) Reader(origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)) ports.BatchHandler {
	return deadLetterReader{dl: dl, origin: origin}
}

type deadLetterReader struct {
	dl     *DeadLetters
	origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)
}

// HandleBatch stores each dead letter and acknowledges it.
func (r deadLetterReader) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i, d := range ds {
		o, ok := r.origin(d)
		if !ok || o.Group == "" {
			o.Group = "unknown:" + d.Topic
		}
		rec := r.dl.record(o.Group, o.Deliveries, d)
		err := r.dl.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			_, _, err := tx.RecordDeadLetter(ctx, rec)
			return err
		})
		if err != nil {
			r.dl.log.ErrorContext(ctx, "store dead letter failed", "consumer_group", o.Group,
				"message_id", rec.MessageID, "error", err)
			out[i] = retry(d, classify(err))
			continue
		}
		r.dl.log.ErrorContext(ctx, "dead letter", "alert", "DLQ_MESSAGE", "consumer_group", o.Group,
			"topic", rec.Topic, "message_id", rec.MessageID, "broker_message_id", rec.BrokerMessageID,
			"error_class", rec.ErrorClass, "attempts", rec.Attempts)
		out[i] = ports.Acked("stored")
	}
	return out
}

// record builds the stored form of a dead letter of group, received
// deliveries times by that group.
func (dl *DeadLetters) record(group string, deliveries int32, d ports.Delivery) ports.DeadLetterRecord {
	if deliveries <= 0 {
		deliveries = d.DeliveryAttempt
	}
	class, last := "RETRIES_EXHAUSTED", fmt.Sprintf("not acknowledged after %d deliveries", deliveries)
	if err := validBody(dl.cfg.Topics[group], d.Body); err != nil {
		class, last = message.Class(err), err.Error()
	}
	return deadLetterRecord(group, dl.cfg.Topics[group], d, "", class, last, deliveries)
}

// validBody decodes body as the message type of topic.
func validBody(topic ports.Topic, body []byte) error {
	var err error
	switch topic {
	case ports.TopicOrderCreate:
		_, err = message.DecodeOrderCreateRequested(body)
	case ports.TopicOrderTimeout:
		_, _, err = message.DecodePaymentTimeout(body)
	case ports.TopicInventoryCompensate:
		_, err = message.DecodeReleaseReservation(body)
	case ports.TopicOrderStateFIFO:
		_, err = message.DecodeOrderStateChanged(body)
	case ports.TopicOrderEvent:
		_, err = message.DecodeOrderEvent(body)
	}
	return err
}

// List returns a page of dead letters, newest first. The page token is
// the last id of the previous page.
func (dl *DeadLetters) List(ctx context.Context, group string, size int, token string) (ports.DeadLetterPage, error) {
	var before int64
	if token != "" {
		n, err := strconv.ParseInt(token, 10, 64)
		if err != nil || n <= 0 {
			return ports.DeadLetterPage{}, ports.InvalidField("page_token", "is not a token returned by this method")
		}
		before = n
	}
	var page ports.DeadLetterPage
	err := dl.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		list, err := tx.ListDeadLetters(ctx, group, size+1, before)
		if err != nil {
			return err
		}
		if len(list) > size {
			list = list[:size]
			page.NextToken = strconv.FormatInt(list[size-1].ID, 10)
		}
		page.DeadLetters = list
		return nil
	})
	return page, err
}

// Replay republishes a dead letter on behalf of actor; see DeadLetters.
// Exactly one DLQ_REPLAY audit row on DeadLetterTarget(id) records every
// outcome, with the reason, the replay id and count and the pre-check's
// detail: REPLAYED, SKIPPED_ALREADY_APPLIED or REFUSED in the replay's
// transaction, FAILED (the publish failed; the row is committed and the
// error returned), or NOT_FOUND for an unknown id, written in a
// transaction of its own since the replay has nothing to commit (the
// error matches ports.ErrNotFound). A store failure rolls back and audits
// nothing (nothing happened).
func (dl *DeadLetters) Replay(ctx context.Context, actor string, id int64, reason string) (ports.ReplayResult, error) {
	if actor == "" {
		return ports.ReplayResult{}, fmt.Errorf("replay dead letter %d: %w", id, errNoActor)
	}
	res := ports.ReplayResult{ReplayID: dl.ids.NewID(ports.IDReplay)}
	audit := ports.AuditEntry{Actor: actor, Action: ports.AuditDLQReplay, Target: ports.DeadLetterTarget(id)}
	var (
		refusal error
		unknown bool
		letter  ports.DeadLetter
	)
	err := dl.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		d, err := tx.GetDeadLetter(ctx, id)
		if err != nil {
			unknown = errors.Is(err, ports.ErrNotFound)
			return fmt.Errorf("dead letter %d: %w", id, err)
		}
		letter = d.DeadLetter
		res.ReplayCount = d.ReplayCount
		outcome, why, err := dl.precheck(ctx, tx, d)
		if err != nil {
			return err
		}
		switch outcome {
		case ReplaySkippedApplied:
			if err := tx.MarkResolved(ctx, id); err != nil {
				return err
			}
		case ReplayRefused:
			refusal = fmt.Errorf("%w: %s", ports.ErrReplayRefused, why)
		default:
			if perr := dl.publish(ctx, d, res.ReplayID, d.ReplayCount+1); perr != nil {
				outcome, why = ReplayFailed, perr.Error()
				refusal = fmt.Errorf("replay publish: %w", perr)
				break
			}
			if res.ReplayCount, err = tx.MarkReplayed(ctx, id); err != nil {
				return err
			}
		}
		res.Outcome = outcome
		audit.Outcome, audit.Params = outcome, replayParams(reason, why, res)
		return tx.AppendAudit(ctx, audit)
	})
	if unknown {
		audit.Outcome, audit.Params = ports.AuditNotFound, map[string]any{"reason": reason}
		if aerr := auditAlone(ctx, dl.uow, audit); aerr != nil {
			return ports.ReplayResult{}, errors.Join(err, aerr)
		}
		dl.logReplay(ctx, id, actor, ports.DeadLetter{}, slog.String("outcome", ports.AuditNotFound))
		return ports.ReplayResult{}, err
	}
	if err != nil {
		return ports.ReplayResult{}, err
	}
	dl.metrics.ReplayOutcome(res.Outcome)
	dl.logReplay(ctx, id, actor, letter, slog.String("replay_id", res.ReplayID),
		slog.Int64("replay_count", int64(res.ReplayCount)), slog.String("outcome", res.Outcome))
	if refusal != nil {
		return ports.ReplayResult{}, refusal
	}
	return res, nil
}

// replayParams are the audited parameters of a replay: the operator's
// reason, the pre-check's or the publish's detail (when any), the replay
// id and the replay count after the attempt.
func replayParams(reason, detail string, res ports.ReplayResult) map[string]any {
	p := map[string]any{"reason": reason, "replay_id": res.ReplayID, "replay_count": res.ReplayCount}
	if detail != "" {
		p["detail"] = detail
	}
	return p
}

// precheck applies spec 25.2 and returns REPLAYED (go ahead),
// SKIPPED_ALREADY_APPLIED or REFUSED with a reason.
func (dl *DeadLetters) precheck(ctx context.Context, tx ports.Tx, d ports.StoredDeadLetter) (string, string, error) {
	if d.ReplayCount >= dl.cfg.ReplayCap {
		return ReplayRefused, fmt.Sprintf("replay cap %d reached", dl.cfg.ReplayCap), nil
	}
	rec := d.Record
	if err := validBody(rec.Topic, rec.Body); err != nil {
		return ReplayRefused, "message still not processable: " + message.Class(err), nil
	}
	st, err := tx.InboxStatusOf(ctx, rec.ConsumerGroup, rec.MessageID)
	switch {
	case err == nil && st != ports.InboxProcessing:
		return ReplaySkippedApplied, "inbox shows " + string(st), nil
	case err != nil && !errors.Is(err, ports.ErrNotFound):
		return "", "", err
	}
	switch rec.ConsumerGroup {
	case dl.cfg.CreateGroup:
		m, _ := message.DecodeOrderCreateRequested(rec.Body)
		states, err := tx.ReservationStates(ctx, []string{m.ReservationID})
		if err != nil {
			return "", "", err
		}
		if len(states) == 1 && states[0].Outcome != "" {
			return ReplaySkippedApplied, "reservation already " + states[0].Outcome, nil
		}
		if _, err := tx.GetActivity(ctx, m.ActivityID, m.SKUID); errors.Is(err, ports.ErrNotFound) {
			return ReplayRefused, "activity still unknown", nil
		} else if err != nil {
			return "", "", err
		}
	case dl.cfg.CompensateGroup:
		m, _ := message.DecodeReleaseReservation(rec.Body)
		r, err := dl.reservations.Get(ctx, ports.ReservationRef{ActivityID: m.ActivityID, SKUID: m.SKUID,
			ReservationID: m.ReservationID, UserID: m.UserID})
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return ReplayRefused, "reservation unknown in Redis", nil
		case err != nil:
			return "", "", err
		case r.Status == reservation.StatusReleased:
			return ReplaySkippedApplied, "reservation already released", nil
		}
	}
	return ReplayReplayed, "", nil
}

// publish sends the dead letter back to its topic with the original
// message id and the replay fields.
func (dl *DeadLetters) publish(ctx context.Context, d ports.StoredDeadLetter, replayID string, count int32) error {
	rec := d.Record
	body, _, err := message.WithReplay(rec.Body, replayID)
	if err != nil {
		return err
	}
	props := make(map[string]string, len(rec.Properties)+2)
	for k, v := range rec.Properties {
		props[k] = v
	}
	props[message.PropMessageID] = rec.MessageID
	props[message.PropReplayID] = replayID
	props[message.PropReplayCount] = strconv.Itoa(int(count))
	msg := ports.OutboundMessage{Topic: rec.Topic, MessageID: rec.MessageID, Tag: rec.Tag, Keys: rec.Keys,
		Body: body, Properties: props}
	if rec.Topic == ports.TopicOrderStateFIFO {
		msg.MessageGroup = rec.MessageGroup
	}
	_, err = dl.publisher.Publish(ctx, msg)
	return err
}

// RunGauge reports the open dead letters and the age of the oldest every
// interval until ctx is canceled (the alert of spec 17.4: any open dead
// letter pages someone).
func (dl *DeadLetters) RunGauge(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := dl.MeasureGauge(ctx); err != nil && ctx.Err() == nil {
			dl.log.WarnContext(ctx, "measure dead letters failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// MeasureGauge reports the open dead letters once.
func (dl *DeadLetters) MeasureGauge(ctx context.Context) error {
	var st ports.DeadLetterStats
	if err := dl.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		st, err = tx.DeadLetterStats(ctx)
		return err
	}); err != nil {
		return err
	}
	var age time.Duration
	if !st.OldestOpenAt.IsZero() {
		age = max(time.Since(st.OldestOpenAt), 0)
	}
	dl.metrics.DeadLetters(st.Open, age)
	return nil
}

// Stats counts the open dead letters and finds the oldest, as
// MeasureGauge does, but only returns them (no metric is reported).
func (dl *DeadLetters) Stats(ctx context.Context) (ports.DeadLetterStats, error) {
	var st ports.DeadLetterStats
	if err := dl.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		st, err = tx.DeadLetterStats(ctx)
		return err
	}); err != nil {
		return ports.DeadLetterStats{}, fmt.Errorf("dead letter stats: %w", err)
	}
	return st, nil
}

// logReplay writes the one INFO line of a replay ("dead letter replay")
// with the actor, the dead letter's ids (d, when it was read) and extra.
func (dl *DeadLetters) logReplay(ctx context.Context, id int64, actor string, d ports.DeadLetter, extra ...slog.Attr) {
	attrs := []slog.Attr{slog.Int64("dead_letter_id", id), slog.String("actor", actor)}
	if d.MessageID != "" {
		attrs = append(attrs, slog.String("message_id", d.MessageID), slog.String("consumer_group", d.ConsumerGroup),
			slog.String("topic", d.Topic))
	}
	if tc := ports.TraceFrom(ctx); tc.TraceID != "" {
		attrs = append(attrs, slog.String("trace_id", tc.TraceID))
	}
	dl.log.LogAttrs(ctx, slog.LevelInfo, "dead letter replay", append(attrs, extra...)...)
}
