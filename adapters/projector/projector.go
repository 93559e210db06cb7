// Package projector is the consumer kit of seckill's order events: a module
// outside seckill imports it to build its own query view (a sales
// dashboard, an order history) in its own PostgreSQL database from
// seckill.v1.EventService/Subscribe, with exactly-once view updates across
// crashes and reconnects.
//
// A consumer writes a Handler (Setup creates its tables, Apply writes one
// event's effect in the kit's transaction), opens a Store on its pool and
// calls Run with a Source (a Subscription over an EventService client).
//
// # Exactly once
//
// Run calls Store.Migrate and Handler.Setup (in a transaction) at start;
// both are idempotent. Each batch of items is one transaction of the
// consumer's pool: the handler's writes for every event of the batch, then
// projector_checkpoints.position = the batch's last position, then commit.
// A restart (or a resubscription after an error) resumes from the stored
// position, and an item at or below it is skipped (a duplicate delivered
// again after a reconnect), so an event's effect is never lost and never
// doubled. Checkpoint items advance the position too: they are batched
// with the events, and an idle checkpoint alone is one small transaction.
// Each batch locks its checkpoint row, so two Runs of one version (two
// replicas) never apply an event twice: the one that waited finds the
// position moved and resubscribes from it.
//
// # Batching
//
// A goroutine owned by Run reads the Source into a bounded channel (twice
// Options.Batch items); the loop takes one item (waiting for it), then
// whatever is immediately available up to Batch, and commits. The
// goroutine is ended (its context canceled) and awaited before Run returns
// or resubscribes.
//
// # Failing handlers and parked events
//
// Each event is applied under a savepoint. A failing Apply is rolled back
// to its savepoint and retried with exponential backoff (BackoffBase
// doubling to BackoffMax) up to Options.Retries attempts; an error wrapping
// ErrPermanent is not retried. Then the event is parked: a projector_parked
// row holds its protobuf bytes and the error's text, and the stream goes
// on. Parking is per order: an event whose order already has parked events
// is parked behind them without being applied ("behind parked position N"),
// so an order's events are never applied out of order while the other
// orders continue. Every Options.RetryParkedEvery Run tries the parked
// orders again, oldest first, with the semantics of RetryParked; an order
// whose parked events all apply is unparked. Store.Parked lists the parked
// events of a view, RetryParked retries one order on demand.
//
// # Infrastructure errors
//
// A failing begin, savepoint or commit, a lost connection or a failing
// stream is logged; Run backs off (BackoffBase doubling to BackoffMax,
// reset by a committed batch) and resubscribes from the stored position.
// Every wait ends with the context. A refusal that resubscribing cannot
// fix ends Run with the service's error (a *connect.Error): the token
// refused (Unauthenticated, PermissionDenied) or the request
// (InvalidArgument, for example an event type the service does not know).
//
// # Blue/green rebuilds
//
// A view is identified by its name and version, and each version has its
// own tables (View.Table). A version is Rebuilding while projector_active
// has no row for the name or a row with a lower version. At the first live
// checkpoint (the subscription has caught up with the log's head; it may
// repeat the last event's position) a
// Rebuilding version records itself in projector_active, in the same
// transaction as that checkpoint and only if no higher version is active,
// logs the switch, and from then on is not Rebuilding. A Run whose version
// is lower than the active one returns ErrSuperseded: it checks at start
// and in every batch transaction, including that of an idle checkpoint
// (the service sends one every few seconds), so an idle old version stops
// within seconds of the switch. So a new version is deployed beside the
// serving one: it builds from position 0 while the old one keeps serving,
// switches once it is live, and the old version's Run ends with
// ErrSuperseded. Readers call Store.Active to pick the tables to read.
// Dropping an old version's tables (and its rows of projector_checkpoints
// and projector_parked) is the consumer's choice; the kit never drops
// anything.
//
// The first version ever deployed (no active row) is Rebuilding too until
// it is live: history replays without side effects, so a new view never
// mails ten thousand old buyers.
//
// # Side effects
//
// A Handler that acts outside its view (mail, webhooks) implements
// SideEffects: AfterCommit is called after the commit of each event
// applied while the view is not Rebuilding, at most once per event. A
// crash between the commit and AfterCommit skips it; a handler that needs
// at-least-once side effects writes an outbox row in Apply when
// !v.Rebuilding instead, and delivers the outbox itself.
package projector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"

	seckillv1 "github.com/seckill-dev/seckill/proto/gen/seckill/v1"
	"github.com/seckill-dev/seckill/proto/gen/seckill/v1/seckillv1connect"
)

// Item is one item of a subscription: an event or a checkpoint.
type Item struct {
	// Event is the event, nil for a checkpoint.
	Event *seckillv1.OrderEvent
	// Position is the event's or the checkpoint's position in the log.
	Position int64
	// Live is a checkpoint's live flag: true once the subscription has
	// caught up with the log's head (catch-up is over).
	Live bool
}

// Source is a subscription to the order events.
type Source interface {
	// Stream calls fn with every item after position from, in position
	// order, until ctx ends (nil), fn fails (fn's error, returned as is) or
	// the stream fails (an error; the caller resubscribes from its own
	// checkpoint).
	Stream(ctx context.Context, from int64, fn func(ctx context.Context, it Item) error) error
}

// Subscription is the Source over EventService/Subscribe. Client is any
// Connect client of the service (connect.WithGRPC() and
// connect.WithGRPCWeb() clients work too).
type Subscription struct {
	// Client is the EventService client.
	Client seckillv1connect.EventServiceClient
	// Token returns the bearer token (scope events); it is asked at each
	// (re)subscribe, so it may refresh an expiring token.
	Token func(ctx context.Context) (string, error)
	// ActivityID selects the events of one activity; 0 selects every
	// activity.
	ActivityID int64
	// EventTypes selects these event types (ORDER_CREATED, ...); empty
	// selects every type.
	EventTypes []string
}

// Stream subscribes from position from and calls fn with each event and
// checkpoint the server sends, in order. It returns nil when ctx ends,
// fn's error as is when fn fails, and an error wrapping the server's
// *connect.Error (for example ResourceExhausted SUBSCRIBER_TOO_SLOW, or
// Unavailable at the server's shutdown) when the stream fails or ends;
// each of these means: resubscribe from the last position handled.
func (s *Subscription) Stream(ctx context.Context, from int64, fn func(context.Context, Item) error) error {
	if s.Client == nil {
		return errors.New("projector: Subscription.Client is nil")
	}
	if s.Token == nil {
		return errors.New("projector: Subscription.Token is nil")
	}
	tok, err := s.Token(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("projector: subscription token: %w", err)
	}
	req := connect.NewRequest(&seckillv1.SubscribeRequest{
		FromPosition: from, ActivityId: s.ActivityID, EventTypes: s.EventTypes,
	})
	req.Header().Set("Authorization", "Bearer "+tok)
	stream, err := s.Client.Subscribe(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("projector: subscribe from position %d: %w", from, err)
	}
	defer func() { _ = stream.Close() }()
	for stream.Receive() {
		msg := stream.Msg()
		var it Item
		switch {
		case msg.GetEvent() != nil:
			it = Item{Event: msg.GetEvent(), Position: msg.GetEvent().GetPosition()}
		case msg.GetCheckpoint() != nil:
			it = Item{Position: msg.GetCheckpoint().GetPosition(), Live: msg.GetCheckpoint().GetLive()}
		default:
			continue // an item kind this client does not know
		}
		if err := fn(ctx, it); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := stream.Err(); err != nil {
		return fmt.Errorf("projector: subscription from position %d: %w", from, err)
	}
	return fmt.Errorf("projector: subscription from position %d: the server ended the stream", from)
}

// View is the version of a projection a Handler writes.
type View struct {
	// Name is the projection's name, for example "salesview".
	Name string
	// Version is the projection's version, >= 1.
	Version int
	// Rebuilding is true while this version is not the active one (it is
	// catching up): side effects must be suppressed.
	Rebuilding bool
}

// Table returns the name of one of the version's tables,
// "<name>_v<version>_<suffix>", quoted as an SQL identifier, ready to be
// placed in a statement.
func (v View) Table(suffix string) string {
	return pgx.Identifier{fmt.Sprintf("%s_v%d_%s", v.Name, v.Version, suffix)}.Sanitize()
}

// Handler writes a projection.
type Handler interface {
	// Setup creates the version's tables if they do not exist, in tx.
	Setup(ctx context.Context, tx pgx.Tx, v View) error
	// Apply writes e's effect on the view in tx (the kit commits it with
	// the checkpoint). An error is retried with backoff, then the event is
	// parked (see Run); an error wrapping ErrPermanent parks it at once.
	Apply(ctx context.Context, tx pgx.Tx, v View, e *seckillv1.OrderEvent) error
}

// SideEffects is implemented by a Handler that acts outside its view (mail,
// webhooks). AfterCommit is called after the commit of each applied event,
// never while v.Rebuilding, at most once per event: a crash after the
// commit skips it. A handler needing at-least-once side effects writes an
// outbox row in Apply when !v.Rebuilding instead.
type SideEffects interface {
	// AfterCommit acts on e, whose effect on the view has been committed.
	AfterCommit(ctx context.Context, v View, e *seckillv1.OrderEvent)
}

// ErrPermanent marks a handler error that retrying cannot fix: the event
// is parked at once. A handler returns fmt.Errorf("...: %w", ErrPermanent).
var ErrPermanent = errors.New("projector: permanent handler error")

// ErrSuperseded is returned by Run of a version once a newer version of
// the projection is active.
var ErrSuperseded = errors.New("projector: a newer version of the projection is active")

// Options configure Run (and RetryParked, which uses Name, Version and
// Logger).
type Options struct {
	// Name is the projection's name (required).
	Name string
	// Version is the projection's version (required, >= 1).
	Version int
	// Batch is the number of items per transaction (default 256).
	Batch int
	// Retries is the number of attempts of a failing Apply before the
	// event is parked (default 5).
	Retries int
	// BackoffBase and BackoffMax bound the waits between handler retries
	// and resubscribes: BackoffBase doubling up to BackoffMax (defaults
	// 100ms and 5s).
	BackoffBase, BackoffMax time.Duration
	// RetryParkedEvery is how often Run tries the parked orders again
	// (default 30s).
	RetryParkedEvery time.Duration
	// Logger receives the kit's logs; nil is slog.Default().
	Logger *slog.Logger
	// BeforeCheckpoint, when set, is called inside each batch's
	// transaction after the handler's writes and before the checkpoint is
	// written (a failpoint for crash tests: a test kills the process here;
	// an error returned aborts the batch like a crash).
	BeforeCheckpoint func(ctx context.Context, position int64) error
}

// Default values of Options.
const (
	DefaultBatch            = 256
	DefaultRetries          = 5
	DefaultBackoffBase      = 100 * time.Millisecond
	DefaultBackoffMax       = 5 * time.Second
	DefaultRetryParkedEvery = 30 * time.Second
)

// withDefaults validates o and returns it with its defaults filled in.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Name == "":
		return o, errors.New("projector: Options.Name is required")
	case o.Version < 1:
		return o, fmt.Errorf("projector: Options.Version is %d, must be >= 1", o.Version)
	case o.Batch < 0:
		return o, fmt.Errorf("projector: Options.Batch is %d, must be >= 0 (0: %d)", o.Batch, DefaultBatch)
	case o.Retries < 0:
		return o, fmt.Errorf("projector: Options.Retries is %d, must be >= 0 (0: %d)", o.Retries, DefaultRetries)
	case o.BackoffBase < 0 || o.BackoffMax < 0 || o.RetryParkedEvery < 0:
		return o, errors.New("projector: Options.BackoffBase, BackoffMax and RetryParkedEvery must be >= 0 (0: the default)")
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.BackoffBase == 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax == 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.BackoffMax < o.BackoffBase {
		o.BackoffMax = o.BackoffBase
	}
	if o.RetryParkedEvery == 0 {
		o.RetryParkedEvery = DefaultRetryParkedEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
