package projector

import (
	"connectrpc.com/connect"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
)

// maxErrorText bounds the error text stored with a parked event.
const maxErrorText = 2000

// maxRetryOrders bounds the parked orders one periodic retry round tries.
const maxRetryOrders = 1000

// Run projects src into the view (opt.Name, opt.Version) until ctx ends
// (nil) or a newer version of the projection becomes active (an error
// wrapping ErrSuperseded). Invalid options (no Name, Version < 1, a
// negative value) or a nil src, h or store are an error at once. Every
// other failure (the database, the stream, Setup) is logged and retried
// with backoff from the stored position; the package documentation states
// the guarantees.
func Run(ctx context.Context, src Source, h Handler, store *Store, opt Options) error {
	opt, err := opt.withDefaults()
	if err != nil {
		return err
	}
	if src == nil || h == nil || store == nil || store.pool == nil {
		return errors.New("projector: Run needs a Source, a Handler and a Store (NewStore)")
	}
	r := &runner{h: h, store: store, opt: opt, src: src,
		log: opt.Logger.With("projection", opt.Name, "version", opt.Version)}
	backoff := opt.BackoffBase
	for {
		progressed, err := r.session(ctx)
		if errors.Is(err, ErrSuperseded) {
			r.log.Info("projector: a newer version is active; this version stops")
			return fmt.Errorf("projector: %s v%d: %w", opt.Name, opt.Version, err)
		}
		if ended(ctx) {
			return nil // the errors of an ending context are not failures
		}
		if refused(err) {
			r.log.Error("projector: the service refuses the subscription; this run stops", "err", err)
			return fmt.Errorf("projector: %s v%d: %w", opt.Name, opt.Version, err)
		}
		if progressed {
			backoff = opt.BackoffBase
		}
		r.log.Warn("projector: resubscribing after an error", "err", err, "backoff", backoff)
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, opt.BackoffMax)
	}
}

// runner is the state of one Run.
type runner struct {
	src       Source
	h         Handler
	store     *Store
	opt       Options
	log       *slog.Logger
	setupDone bool
}

// applied is an event applied while its view was not rebuilding: its
// AfterCommit is due once the transaction commits.
type applied struct {
	view  View
	event *seckillv1.OrderEvent
}

// session runs one subscription: setup (until done once), the stored
// position, then batches until ctx ends (nil), the stream fails or a
// transaction fails. progressed reports whether a batch was committed.
func (r *runner) session(ctx context.Context) (progressed bool, err error) {
	if !r.setupDone {
		if err := r.setup(ctx); err != nil {
			return false, err
		}
		r.setupDone = true
	}
	pos, err := r.store.Position(ctx, r.opt.Name, r.opt.Version)
	if err != nil {
		return false, err
	}
	rebuilding, err := r.rebuilding(ctx, r.store.pool)
	if err != nil {
		return false, err
	}

	sctx, cancel := context.WithCancel(ctx)
	ch := make(chan Item, 2*r.opt.Batch)
	var streamErr error
	go func() {
		defer close(ch)
		streamErr = r.src.Stream(sctx, pos, func(c context.Context, it Item) error {
			select {
			case ch <- it:
				return nil
			case <-c.Done():
				return c.Err()
			}
		})
	}()
	defer func() {
		cancel()
		for range ch { // await the reader: it closes ch when Stream returns
		}
	}()

	ticker := time.NewTicker(r.opt.RetryParkedEvery)
	defer ticker.Stop()
	batch := make([]Item, 0, r.opt.Batch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return progressed, nil
		case <-ticker.C:
			if err := r.retryAllParked(ctx); err != nil {
				return progressed, err
			}
			continue
		case it, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return progressed, nil
				}
				if streamErr == nil {
					streamErr = errors.New("the stream ended")
				}
				return progressed, fmt.Errorf("projector: stream from position %d: %w", pos, streamErr)
			}
			batch = append(batch, it)
		}
	fill:
		for len(batch) < r.opt.Batch {
			select {
			case it, ok := <-ch:
				if !ok {
					break fill // the next receive reports the stream's end
				}
				batch = append(batch, it)
			default:
				break fill
			}
		}
		next, nowRebuilding, done, err := r.commitBatch(ctx, pos, rebuilding, batch)
		if err != nil {
			return progressed, err
		}
		if rebuilding && !nowRebuilding {
			r.log.Info("projector: caught up with the log; this version is now active", "position", next)
		}
		pos, rebuilding, progressed = next, nowRebuilding, true
		r.afterCommit(ctx, done)
	}
}

// setup creates the kit's tables and the handler's.
func (r *runner) setup(ctx context.Context) error {
	if err := r.store.Migrate(ctx); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, r.store.pool, func(tx pgx.Tx) error {
		rebuilding, err := r.rebuilding(ctx, tx)
		if err != nil {
			return err
		}
		return r.h.Setup(ctx, tx, View{Name: r.opt.Name, Version: r.opt.Version, Rebuilding: rebuilding})
	})
	if err != nil {
		return fmt.Errorf("projector: setup of %s v%d: %w", r.opt.Name, r.opt.Version, err)
	}
	return nil
}

// rebuilding reads the active version: ErrSuperseded when it is higher
// than this one, else whether this version is not (yet) the active one.
func (r *runner) rebuilding(ctx context.Context, q querier) (bool, error) {
	v, ok, err := activeVersion(ctx, q, r.opt.Name)
	if err != nil {
		return false, fmt.Errorf("projector: active version: %w", err)
	}
	if ok && v > r.opt.Version {
		return false, ErrSuperseded
	}
	return !ok || v < r.opt.Version, nil
}

// commitBatch writes batch in one transaction: each new event applied (or
// parked), the switch to active at the first live checkpoint while
// rebuilding, then the checkpoint. It returns the new position, whether
// the view is still rebuilding, and the events whose AfterCommit is due.
// Nothing is written when the batch holds only duplicates.
func (r *runner) commitBatch(ctx context.Context, pos int64, rebuilding bool, batch []Item) (int64, bool, []applied, error) {
	tx, err := r.store.pool.Begin(ctx)
	if err != nil {
		return pos, rebuilding, nil, fmt.Errorf("projector: begin batch: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The checkpoint row, locked for the batch, guards against a second
	// Run of this version (another replica): the one that waited sees a
	// moved position and resubscribes from it instead of applying again.
	if _, err := tx.Exec(ctx, `INSERT INTO projector_checkpoints (name, version, position) VALUES ($1, $2, 0)
		ON CONFLICT (name, version) DO NOTHING`, r.opt.Name, r.opt.Version); err != nil {
		return pos, rebuilding, nil, fmt.Errorf("projector: create checkpoint: %w", err)
	}
	var stored int64
	if err := tx.QueryRow(ctx, `SELECT position FROM projector_checkpoints WHERE name = $1 AND version = $2 FOR UPDATE`,
		r.opt.Name, r.opt.Version).Scan(&stored); err != nil {
		return pos, rebuilding, nil, fmt.Errorf("projector: lock checkpoint: %w", err)
	}
	if stored != pos {
		return pos, rebuilding, nil, fmt.Errorf("projector: the checkpoint moved from %d to %d (another Run of %s v%d?)",
			pos, stored, r.opt.Name, r.opt.Version)
	}
	view := View{Name: r.opt.Name, Version: r.opt.Version, Rebuilding: rebuilding}
	start := pos
	var done []applied
	for _, it := range batch {
		if it.Event == nil && it.Live && view.Rebuilding {
			// Caught up (a live checkpoint may repeat the last event's
			// position): this version becomes the active one with this
			// transaction, unless a higher one already is.
			if _, err := tx.Exec(ctx, `INSERT INTO projector_active (name, version) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, switched_at = now()
				WHERE projector_active.version < EXCLUDED.version`, r.opt.Name, r.opt.Version); err != nil {
				return start, rebuilding, nil, fmt.Errorf("projector: switch to active: %w", err)
			}
			view.Rebuilding = false
		}
		if it.Position <= pos {
			continue // delivered again after a reconnect
		}
		if it.Event != nil {
			ok, err := r.handle(ctx, tx, view, it.Event)
			if err != nil {
				return start, rebuilding, nil, err
			}
			if ok && !view.Rebuilding {
				done = append(done, applied{view: view, event: it.Event})
			}
		}
		pos = it.Position
	}
	if pos == start && view.Rebuilding == rebuilding {
		// Only duplicates (an idle checkpoint repeats the position): no
		// write, but a newer active version still ends this one, so an
		// idle superseded Run stops at its next checkpoint.
		if _, err := r.rebuilding(ctx, tx); err != nil {
			return start, rebuilding, nil, err
		}
		return start, rebuilding, nil, nil
	}
	if f := r.opt.BeforeCheckpoint; f != nil {
		if err := f(ctx, pos); err != nil {
			return start, rebuilding, nil, fmt.Errorf("projector: before checkpoint %d: %w", pos, err)
		}
	}
	if _, err := r.rebuilding(ctx, tx); err != nil {
		return start, rebuilding, nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO projector_checkpoints (name, version, position) VALUES ($1, $2, $3)
		ON CONFLICT (name, version) DO UPDATE SET position = EXCLUDED.position, updated_at = now()`,
		r.opt.Name, r.opt.Version, pos); err != nil {
		return start, rebuilding, nil, fmt.Errorf("projector: write checkpoint %d: %w", pos, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return start, rebuilding, nil, fmt.Errorf("projector: commit batch up to %d: %w", pos, err)
	}
	return pos, view.Rebuilding, done, nil
}

// handle applies e in tx, or parks it: behind its order's parked events,
// or after its attempts failed. ok reports that it was applied; err is an
// infrastructure error that aborts the batch.
func (r *runner) handle(ctx context.Context, tx pgx.Tx, view View, e *seckillv1.OrderEvent) (ok bool, err error) {
	var blocker *int64
	if err := tx.QueryRow(ctx, `SELECT min(position) FROM projector_parked WHERE name = $1 AND version = $2 AND order_id = $3`,
		r.opt.Name, r.opt.Version, e.GetOrderId()).Scan(&blocker); err != nil {
		return false, fmt.Errorf("projector: parked events of order %s: %w", e.GetOrderId(), err)
	}
	if blocker != nil {
		r.log.Warn("projector: event parked behind its order's parked event", "position", e.GetPosition(),
			"order_id", e.GetOrderId(), "behind", *blocker)
		return false, park(ctx, tx, r.opt, e, fmt.Sprintf("behind parked position %d", *blocker), 0)
	}
	attempts, herr, err := r.apply(ctx, tx, view, e)
	if err != nil {
		return false, err
	}
	if herr == nil {
		return true, nil
	}
	r.log.Warn("projector: event parked", "position", e.GetPosition(), "order_id", e.GetOrderId(),
		"event_id", e.GetEventId(), "attempts", attempts, "err", herr)
	return false, park(ctx, tx, r.opt, e, herr.Error(), attempts)
}

// apply calls the handler under a savepoint, retrying with backoff up to
// opt.Retries attempts (one for ErrPermanent). herr is the handler's last
// error; err an infrastructure error.
func (r *runner) apply(ctx context.Context, tx pgx.Tx, view View, e *seckillv1.OrderEvent) (attempts int, herr, err error) {
	backoff := r.opt.BackoffBase
	for attempt := 1; ; attempt++ {
		herr, err := applyOnce(ctx, tx, r.h, view, e)
		if err != nil || herr == nil {
			return attempt, nil, err
		}
		if ctx.Err() != nil {
			return attempt, nil, ctx.Err()
		}
		if errors.Is(herr, ErrPermanent) || attempt >= r.opt.Retries {
			return attempt, herr, nil
		}
		r.log.Debug("projector: handler failed; retrying", "position", e.GetPosition(), "attempt", attempt, "err", herr)
		if !sleep(ctx, backoff) {
			return attempt, nil, ctx.Err()
		}
		backoff = min(2*backoff, r.opt.BackoffMax)
	}
}

// applyOnce calls h.Apply under a savepoint of tx: committed on success,
// rolled back on the handler's error (herr). err is a failing savepoint.
func applyOnce(ctx context.Context, tx pgx.Tx, h Handler, view View, e *seckillv1.OrderEvent) (herr, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("projector: savepoint: %w", err)
	}
	if herr := h.Apply(ctx, sp, view, e); herr != nil {
		if err := sp.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("projector: rollback to savepoint after %v: %w", herr, err)
		}
		return herr, nil
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("projector: release savepoint: %w", err)
	}
	return nil, nil
}

// park records e as parked in tx.
func park(ctx context.Context, tx pgx.Tx, opt Options, e *seckillv1.OrderEvent, text string, attempts int) error {
	raw, err := proto.Marshal(e)
	if err != nil {
		return fmt.Errorf("projector: marshal event %s: %w", e.GetEventId(), err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO projector_parked (name, version, position, order_id, event, error, attempts)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name, version, position) DO NOTHING`,
		opt.Name, opt.Version, e.GetPosition(), e.GetOrderId(), raw, errorText(text), attempts); err != nil {
		return fmt.Errorf("projector: park event %s: %w", e.GetEventId(), err)
	}
	return nil
}

// errorText makes an error's text storable: valid UTF-8 without NUL
// bytes, at most maxErrorText bytes.
func errorText(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
	if len(s) > maxErrorText {
		s = strings.ToValidUTF8(s[:maxErrorText], "") + "..."
	}
	return s
}

// afterCommit calls the handler's AfterCommit for each event of done.
func (r *runner) afterCommit(ctx context.Context, done []applied) {
	callAfterCommit(ctx, r.h, done)
}

func callAfterCommit(ctx context.Context, h Handler, done []applied) {
	fx, ok := h.(SideEffects)
	if !ok {
		return
	}
	for _, a := range done {
		fx.AfterCommit(ctx, a.view, a.event)
	}
}

// retryAllParked tries the parked orders again, oldest first (at most
// maxRetryOrders a round). It returns an infrastructure error only.
func (r *runner) retryAllParked(ctx context.Context) error {
	rows, err := r.store.pool.Query(ctx, `SELECT order_id FROM projector_parked WHERE name = $1 AND version = $2
		GROUP BY order_id ORDER BY min(position) LIMIT $3`, r.opt.Name, r.opt.Version, maxRetryOrders)
	if err != nil {
		return fmt.Errorf("projector: parked orders: %w", err)
	}
	orders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("projector: parked orders: %w", err)
	}
	unparked := 0
	for _, id := range orders {
		n, left, err := retryOrder(ctx, r.h, r.store, r.opt, id)
		if err != nil {
			return err
		}
		if n > 0 && left == 0 {
			unparked++
		}
	}
	if len(orders) > 0 {
		r.log.Info("projector: retried parked orders", "orders", len(orders), "unparked", unparked)
	}
	return nil
}

// RetryParked applies the parked events of one order again (opt.Name,
// opt.Version), in position order, in one transaction, one attempt each;
// it stops at the first failure (that event stays parked with attempts+1
// and the new error, the later ones stay parked behind it) and returns how
// many were applied (and unparked). The handler's AfterCommit is called
// for them after the commit unless the version is rebuilding. It returns
// an error wrapping ErrSuperseded when a newer version is active, and an
// error for invalid options or a failing database; a failing handler is
// not an error.
func RetryParked(ctx context.Context, h Handler, store *Store, opt Options, orderID string) (int, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return 0, err
	}
	if h == nil || store == nil || store.pool == nil {
		return 0, errors.New("projector: RetryParked needs a Handler and a Store (NewStore)")
	}
	n, _, err := retryOrder(ctx, h, store, opt, orderID)
	return n, err
}

// parkedRow is one parked event read for a retry.
type parkedRow struct {
	position int64
	raw      []byte
}

// retryOrder is RetryParked: it returns how many events were applied and
// how many stay parked.
func retryOrder(ctx context.Context, h Handler, store *Store, opt Options, orderID string) (n, left int, err error) {
	tx, err := store.pool.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("projector: begin retry of order %s: %w", orderID, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	r := &runner{opt: opt}
	rebuilding, err := r.rebuilding(ctx, tx)
	if err != nil {
		return 0, 0, err
	}
	view := View{Name: opt.Name, Version: opt.Version, Rebuilding: rebuilding}
	rows, err := tx.Query(ctx, `SELECT position, event FROM projector_parked
		WHERE name = $1 AND version = $2 AND order_id = $3 ORDER BY position FOR UPDATE`, opt.Name, opt.Version, orderID)
	if err != nil {
		return 0, 0, fmt.Errorf("projector: parked events of order %s: %w", orderID, err)
	}
	parked, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (parkedRow, error) {
		var p parkedRow
		err := row.Scan(&p.position, &p.raw)
		return p, err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("projector: parked events of order %s: %w", orderID, err)
	}
	var done []applied
	for i, p := range parked {
		e := &seckillv1.OrderEvent{}
		herr := proto.Unmarshal(p.raw, e)
		if herr != nil {
			herr = fmt.Errorf("%w: unmarshal parked event: %v", ErrPermanent, herr)
		} else {
			herr, err = applyOnce(ctx, tx, h, view, e)
			if err != nil {
				return 0, 0, err
			}
		}
		if herr != nil {
			if _, err := tx.Exec(ctx, `UPDATE projector_parked SET attempts = attempts + 1, error = $4
				WHERE name = $1 AND version = $2 AND position = $3`, opt.Name, opt.Version, p.position, errorText(herr.Error())); err != nil {
				return 0, 0, fmt.Errorf("projector: update parked event %d: %w", p.position, err)
			}
			opt.Logger.Warn("projector: parked event failed again", "projection", opt.Name, "version", opt.Version,
				"position", p.position, "order_id", orderID, "err", herr)
			left = len(parked) - i
			break
		}
		if _, err := tx.Exec(ctx, `DELETE FROM projector_parked WHERE name = $1 AND version = $2 AND position = $3`,
			opt.Name, opt.Version, p.position); err != nil {
			return 0, 0, fmt.Errorf("projector: unpark event %d: %w", p.position, err)
		}
		n++
		if !view.Rebuilding {
			done = append(done, applied{view: view, event: e})
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, fmt.Errorf("projector: commit retry of order %s: %w", orderID, err)
	}
	callAfterCommit(ctx, h, done)
	return n, left, nil
}

// ended reports whether ctx has ended.
func ended(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// refused reports a stream error that resubscribing cannot fix: the
// service refused the token (Unauthenticated, PermissionDenied) or the
// request (InvalidArgument: a filter it does not know, a position beyond
// its head).
func refused(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument:
		return true
	}
	return false
}
