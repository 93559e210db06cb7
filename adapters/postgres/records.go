package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// RecordRejections implements ports.RejectionStore with one INSERT ...
// SELECT FROM unnest ... ON CONFLICT DO NOTHING: an order id or reservation
// id that already has a rejection keeps the stored one.
func (t *tx) RecordRejections(ctx context.Context, rs []ports.Rejection) error {
	if len(rs) == 0 {
		return nil
	}
	n := len(rs)
	ord, rsv, msg, reason := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	activity, sku, user := make([]int64, n), make([]int64, n), make([]int64, n)
	at := make([]time.Time, n)
	for i, r := range rs {
		if r.RejectedAt.IsZero() {
			return fmt.Errorf("postgres: record rejections: %s has no rejection time", r.OrderID)
		}
		ord[i], rsv[i], msg[i], reason[i] = r.OrderID, r.ReservationID, r.MessageID, r.Reason
		activity[i], sku[i], user[i], at[i] = r.ActivityID, r.SKUID, r.UserID, r.RejectedAt
	}
	_, err := t.exec(ctx, "record rejections", `
		INSERT INTO order_rejections
		    (order_id, reservation_id, message_id, activity_id, sku_id, user_id, reason, rejected_at)
		SELECT u.order_id, u.reservation_id, u.message_id, u.activity_id, u.sku_id, u.user_id, u.reason, u.rejected_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::text[], $8::timestamptz[])
		     WITH ORDINALITY AS u(order_id, reservation_id, message_id, activity_id, sku_id, user_id, reason, rejected_at, ord)
		ORDER BY u.ord
		ON CONFLICT DO NOTHING`,
		ord, rsv, msg, activity, sku, user, reason, at)
	return err
}

// Quarantine implements ports.QuarantineStore: one INSERT ... ON CONFLICT
// (consumer_group, broker_message_id) DO NOTHING, so a redelivered poison
// message keeps its first row.
func (t *tx) Quarantine(ctx context.Context, m ports.QuarantinedMessage) error {
	props, err := json.Marshal(nonNilMap(m.Properties))
	if err != nil {
		return fmt.Errorf("postgres: quarantine %s: encode properties: %w", m.BrokerMessageID, err)
	}
	_, err = t.exec(ctx, "quarantine", `
		INSERT INTO message_quarantine
		    (consumer_group, topic, message_id, broker_message_id, error_class, reason,
		     body, properties, delivery_attempt, created_at)
		VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6, $7, $8::jsonb, $9, coalesce($10::timestamptz, now()))
		ON CONFLICT (consumer_group, broker_message_id) DO NOTHING`,
		m.ConsumerGroup, m.Topic, m.MessageID, m.BrokerMessageID, m.ErrorClass, m.Reason,
		nonNilBytes(m.Body), string(props), m.DeliveryAttempt, t.nowArg())
	return err
}
