package application

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// RelayConfig tunes the outbox relay.
type RelayConfig struct {
	Interval time.Duration // pause when the outbox is drained
	// IdleMax, when above Interval, lets the pause double after each
	// empty pass up to it (an idle service queries PostgreSQL a few
	// times a second); a pass that finds rows goes back to Interval.
	IdleMax     time.Duration
	Batch       int           // rows claimed per transaction
	Workers     int           // parallel publishers per batch
	Retention   time.Duration // published rows are pruned after this
	BackoffBase time.Duration // first delay after a failed publish
	BackoffMax  time.Duration
	// CoalesceTimeouts merges the payment-timeout rows of one claimed
	// batch that belong to one activity and fall due in the same second
	// into one CancelOrdersIfUnpaid trigger (see coalesceTimeouts).
	CoalesceTimeouts bool
	// HoldDelayed keeps a delayed message (DeliverAt) in the outbox until
	// it is due and then publishes it without DeliverAt: PostgreSQL
	// schedules the payment timeouts when the broker cannot delay a
	// message (brokerplug.Features.DelayedDelivery false).
	HoldDelayed bool
}

// RelayOutbox publishes committed outbox rows. Each batch is claimed in a
// transaction (SKIP LOCKED, so several relays share the work; only rows of
// transactions no longer in flight, so none is overtaken by a later one),
// published, and marked published in the same transaction. A crash
// between publishing and marking republishes the rows with the same
// message ids, which the consumers' inboxes absorb. Rows of one message
// group (or key) are published in order by one worker. A failed publish is
// deferred with exponential backoff; nothing is dropped.
type RelayOutbox struct {
	uow       ports.UnitOfWork
	publisher ports.Publisher
	clock     ports.Clock
	fp        ports.Failpoints
	log       *slog.Logger
	cfg       RelayConfig
}

// NewRelayOutbox wires the relay. fp may be nil.
func NewRelayOutbox(uow ports.UnitOfWork, publisher ports.Publisher, clock ports.Clock, fp ports.Failpoints,
	log *slog.Logger, cfg RelayConfig) *RelayOutbox {
	return &RelayOutbox{uow: uow, publisher: publisher, clock: clock, fp: fp, log: log.With("component", "relay"), cfg: cfg}
}

// Run relays until ctx is canceled, pruning old rows about once a minute.
func (r *RelayOutbox) Run(ctx context.Context) error {
	lastPrune := time.Time{}
	idle := newIdleBackoff(r.cfg.Interval, r.cfg.IdleMax)
	for {
		if w := brokerWait(r.publisher, time.Now()); w > 0 {
			// The broker is believed down: claim nothing until the probe.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(w):
			}
			continue
		}
		n, err := r.RelayOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "relay batch failed", "error", err)
		}
		if now := r.clock.Now(); now.Sub(lastPrune) > time.Minute {
			lastPrune = now
			if _, err := r.Prune(ctx); err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "prune failed", "error", err)
			}
		}
		wait := idle.next(n)
		if n >= r.cfg.Batch {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// RelayOnce publishes one batch and returns how many rows it claimed.
func (r *RelayOutbox) RelayOnce(ctx context.Context) (int, error) {
	claimed := 0
	err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		recs, err := tx.ClaimOutbox(ctx, r.cfg.Batch)
		if err != nil {
			return fmt.Errorf("claim outbox: %w", err)
		}
		claimed = len(recs)
		if claimed == 0 {
			return nil
		}
		if r.cfg.HoldDelayed {
			if recs, err = r.holdUntilDue(ctx, tx, recs); err != nil {
				return err
			}
		}
		items := relayItems(recs)
		if r.cfg.CoalesceTimeouts {
			items = r.coalesceTimeouts(ctx, items)
		}
		if r.cfg.HoldDelayed {
			for i := range items {
				items[i].msg.DeliverAt = time.Time{} // due: the broker delivers it now
			}
		}
		ok, failed := r.publish(ctx, items)
		if err := ports.Inject(ctx, r.fp, ports.FailRelayAfterPublish); err != nil {
			return err
		}
		if len(ok) > 0 {
			if err := tx.MarkPublished(ctx, ok); err != nil {
				return fmt.Errorf("mark published: %w", err)
			}
		}
		for attempts, ids := range failed {
			next := r.clock.Now().Add(Backoff(r.cfg.BackoffBase, r.cfg.BackoffMax, attempts+1))
			if err := tx.DeferOutbox(ctx, ids.ids, next, ids.lastErr); err != nil {
				return fmt.Errorf("defer outbox: %w", err)
			}
		}
		return nil
	})
	return claimed, err
}

// holdUntilDue holds the rows of recs whose DeliverAt is still ahead until
// then (HoldOutbox, no attempt counted) and returns the others.
func (r *RelayOutbox) holdUntilDue(ctx context.Context, tx ports.Tx, recs []ports.OutboxRecord) ([]ports.OutboxRecord, error) {
	now := r.clock.Now()
	due := recs[:0:0]
	held := map[time.Time][]int64{}
	for _, rec := range recs {
		if at := rec.Message.DeliverAt; at.After(now) {
			held[at] = append(held[at], rec.ID)
			continue
		}
		due = append(due, rec)
	}
	for at, ids := range held {
		if err := tx.HoldOutbox(ctx, ids, at); err != nil {
			return nil, fmt.Errorf("hold outbox: %w", err)
		}
	}
	return due, nil
}

// failedRows groups failed rows by their attempt count.
type failedRows struct {
	ids     []int64
	lastErr string
}

// relayItem is one message the relay sends and the outbox rows it stands
// for: one row, or the timeout rows a trigger merged.
type relayItem struct {
	ids      []int64
	attempts int // the highest of its rows
	msg      ports.OutboundMessage
}

func relayItems(recs []ports.OutboxRecord) []relayItem {
	items := make([]relayItem, len(recs))
	for i, rec := range recs {
		items[i] = relayItem{ids: []int64{rec.ID}, attempts: rec.Attempts, msg: rec.Message}
	}
	return items
}

// publish sends items with up to cfg.Workers goroutines; items that share
// a message group (or first key) go to the same worker, in order.
func (r *RelayOutbox) publish(ctx context.Context, items []relayItem) ([]int64, map[int]failedRows) {
	workers := max(1, min(r.cfg.Workers, len(items)))
	lanes := make([][]relayItem, workers)
	for _, it := range items {
		lanes[lane(it.msg, workers)] = append(lanes[lane(it.msg, workers)], it)
	}
	var (
		mu     sync.Mutex
		ok     []int64
		failed = make(map[int]failedRows)
		wg     sync.WaitGroup
	)
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			blocked := map[string]bool{} // a failed group stops its later rows
			down := false
			for _, it := range l {
				key := groupKey(it.msg)
				var err error
				switch {
				case down:
					err = ports.ErrBrokerUnavailable
				case blocked[key]:
					err = errors.New("an earlier message of the group failed")
				default:
					m := it.msg
					m.Retry = it.attempts > 0
					_, err = r.publisher.Publish(ctx, m)
				}
				// Once the broker is believed down, the lane's other rows
				// are deferred without being tried (and without a log
				// line each).
				down = down || errors.Is(err, ports.ErrBrokerUnavailable)
				mu.Lock()
				if err == nil {
					ok = append(ok, it.ids...)
				} else {
					blocked[key] = true
					f := failed[it.attempts]
					f.ids, f.lastErr = append(f.ids, it.ids...), err.Error()
					failed[it.attempts] = f
					if !down {
						r.log.WarnContext(ctx, "outbox publish failed", "outbox_id", it.ids[0], "rows", len(it.ids),
							"message_id", it.msg.MessageID, "topic", it.msg.Topic, "tag", it.msg.Tag, "attempts", it.attempts, "error", err)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok, failed
}

func groupKey(m ports.OutboundMessage) string {
	if m.MessageGroup != "" {
		return m.MessageGroup
	}
	if len(m.Keys) > 0 {
		return m.Keys[0]
	}
	return m.MessageID
}

func lane(m ports.OutboundMessage, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(groupKey(m)))
	return int(h.Sum32() % uint32(n))
}

// Prune deletes rows published longer ago than the retention.
func (r *RelayOutbox) Prune(ctx context.Context) (int64, error) {
	var n int64
	err := r.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		n, err = tx.PruneOutbox(ctx, r.clock.Now().Add(-r.cfg.Retention), 10_000)
		return err
	})
	return n, err
}
