package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seckill-dev/seckill/domain/clientid"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// ErrorDomain is the ErrorInfo domain of every business error.
const ErrorDomain = "seckill.v1"

// The ErrorInfo reasons clients can rely on.
const (
	ReasonSoldOut = "SOLD_OUT"
	// ReasonAlreadyPurchased: the buyer holds a unit of the SKU. While the
	// buyer's canceled purchase is still being given back, the ErrorInfo
	// carries metadata release_in_flight "true" and retry_after (a
	// duration such as "2s"), and a google.rpc.RetryInfo detail says the
	// same: a retry after it may succeed.
	ReasonAlreadyPurchased = "ALREADY_PURCHASED"
	// ReasonActivityNotFound: PlaceOrder for an activity SKU that does
	// not exist (code FailedPrecondition, as the retired ACTIVITY_CLOSED
	// had: the order cannot be placed; NotFound stays the code of reads
	// of an entity).
	ReasonActivityNotFound = "ACTIVITY_NOT_FOUND"
	// ReasonActivityNotStarted: the sale has not started; metadata
	// starts_at is its start (RFC 3339, UTC).
	ReasonActivityNotStarted = "ACTIVITY_NOT_STARTED"
	// ReasonActivityEnded: the sale ended (its end passed or an operator
	// closed it).
	ReasonActivityEnded = "ACTIVITY_ENDED"
	// ReasonActivityPaused: an operator paused the sale; it may resume.
	ReasonActivityPaused = "ACTIVITY_PAUSED"
	// ReasonActivityState: an operator's call does not apply to the
	// activity in its state (pausing an ended sale, resuming one that is
	// not paused).
	ReasonActivityState = "ACTIVITY_STATE"
	// ReasonActivityExists: CreateActivity of an existing activity with
	// other settings (AlreadyExists; metadata "fields" names them).
	ReasonActivityExists     = "ACTIVITY_EXISTS"
	ReasonBacklog            = "BACKLOG"
	ReasonRateLimited        = "RATE_LIMITED"
	ReasonRequestIDReused    = "REQUEST_ID_REUSED"
	ReasonOrderNotPayable    = "ORDER_NOT_PAYABLE"
	ReasonOrderNotCancelable = "ORDER_NOT_CANCELABLE"
	ReasonReplayRefused      = "REPLAY_REFUSED"
	ReasonPaymentExpired     = "PAYMENT_EXPIRED"
	ReasonPaymentIDReused    = "PAYMENT_ID_REUSED"
	ReasonStockPaused        = "STOCK_PAUSED"
	// ReasonSubscriberTooSlow ends an EventService stream whose subscriber
	// did not take its events within the send bound.
	ReasonSubscriberTooSlow = "SUBSCRIBER_TOO_SLOW"
)

// MetadataStartsAt, MetadataRetryAfter and MetadataReleaseInFlight are the
// ErrorInfo metadata keys of ACTIVITY_NOT_STARTED and of ALREADY_PURCHASED
// with a release in flight.
const (
	MetadataStartsAt        = "starts_at"
	MetadataRetryAfter      = "retry_after"
	MetadataReleaseInFlight = "release_in_flight"
)

// businessError maps a business sentinel to its code, ErrorInfo reason and
// the message clients see.
func businessError(err error) (code connect.Code, reason, msg string, ok bool) {
	switch {
	case errors.Is(err, ports.ErrSoldOut):
		return connect.CodeFailedPrecondition, ReasonSoldOut, "sold out", true
	case errors.Is(err, ports.ErrReleaseInFlight):
		return connect.CodeAlreadyExists, ReasonAlreadyPurchased,
			"your canceled order's item is still being given back; retry in a few seconds", true
	case errors.Is(err, ports.ErrAlreadyPurchased):
		return connect.CodeAlreadyExists, ReasonAlreadyPurchased, "you already hold an order for this item", true
	case errors.Is(err, ports.ErrActivityNotFound):
		return connect.CodeFailedPrecondition, ReasonActivityNotFound, "no such activity", true
	case errors.Is(err, ports.ErrActivityNotStarted):
		return connect.CodeFailedPrecondition, ReasonActivityNotStarted, "the sale has not started yet", true
	case errors.Is(err, ports.ErrActivityEnded):
		return connect.CodeFailedPrecondition, ReasonActivityEnded, "the sale has ended", true
	case errors.Is(err, ports.ErrActivityPaused):
		return connect.CodeFailedPrecondition, ReasonActivityPaused, "the sale is paused", true
	case errors.Is(err, ports.ErrActivityState):
		return connect.CodeFailedPrecondition, ReasonActivityState, "not allowed in the activity's state", true
	case errors.Is(err, ports.ErrBacklog):
		return connect.CodeResourceExhausted, ReasonBacklog, "the queue is too long, try again later", true
	case errors.Is(err, ports.ErrStockPaused):
		return connect.CodeUnavailable, ReasonStockPaused, "selling is paused for a few seconds, try again", true
	case errors.Is(err, ports.ErrRateLimited):
		return connect.CodeResourceExhausted, ReasonRateLimited, "too many requests, slow down", true
	case errors.Is(err, ports.ErrRequestIDReused):
		return connect.CodeInvalidArgument, ReasonRequestIDReused, "request_id was already used for another item", true
	case errors.Is(err, ports.ErrOrderNotPayable):
		return connect.CodeFailedPrecondition, ReasonOrderNotPayable, "the order cannot be paid", true
	case errors.Is(err, ports.ErrPaymentExpired):
		return connect.CodeFailedPrecondition, ReasonPaymentExpired, "the payment deadline has passed", true
	case errors.Is(err, ports.ErrPaymentIDReused):
		return connect.CodeAlreadyExists, ReasonPaymentIDReused, "payment_id already confirmed another order", true
	case errors.Is(err, ports.ErrOrderNotCancelable):
		return connect.CodeFailedPrecondition, ReasonOrderNotCancelable, "the order cannot be canceled", true
	case errors.Is(err, ports.ErrSubscriberTooSlow):
		return connect.CodeResourceExhausted, ReasonSubscriberTooSlow,
			"the subscriber did not take the stream's events in time: subscribe again with from_position = the last position you handled", true
	case errors.Is(err, ports.ErrReplayRefused):
		return connect.CodeFailedPrecondition, ReasonReplayRefused, replayRefusedMessage(err), true
	}
	return 0, "", "", false
}

// toConnectError is the single place where errors become Connect errors.
// Business and validation errors keep their message and carry details
// (ErrorInfo reason, BadRequest field); everything else is logged and
// answered without internals.
func toConnectError(ctx context.Context, log *slog.Logger, procedure string, err error) error {
	if err == nil {
		return nil
	}
	var fe *ports.FieldError
	if errors.As(err, &fe) {
		ce := connect.NewError(connect.CodeInvalidArgument, errors.New(fe.Error()))
		addDetail(ce, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: fe.Field, Description: fe.Description},
		}})
		return ce
	}
	if code, reason, msg, ok := businessError(err); ok {
		ce := connect.NewError(code, errors.New(msg))
		meta, retry := businessMetadata(err)
		addDetail(ce, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta})
		if retry > 0 {
			addDetail(ce, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
		}
		if reason == ReasonRequestIDReused {
			addDetail(ce, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
				{Field: "request_id", Description: msg},
			}})
		}
		return ce
	}
	switch {
	case errors.Is(err, clientid.ErrInvalid), errors.Is(err, reservation.ErrInvalid), errors.Is(err, order.ErrInvalid):
		// A rule the edge should have caught: still the caller's input.
		log.WarnContext(ctx, "domain validation failed behind the edge", "procedure", procedure, "error", err)
		return connect.NewError(connect.CodeInvalidArgument, errors.New("invalid argument"))
	case errors.Is(err, ports.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, errors.New("not found"))
	case errors.Is(err, ports.ErrPermissionDenied):
		return connect.NewError(connect.CodePermissionDenied, errors.New("permission denied"))
	case errors.As(err, new(*ports.SettingsConflictError)):
		var sc *ports.SettingsConflictError
		errors.As(err, &sc)
		return settingsConflict(sc)
	case errors.Is(err, ports.ErrAlreadyExists):
		return connect.NewError(connect.CodeAlreadyExists, errors.New("already exists with different settings"))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("canceled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
	case errors.Is(err, ports.ErrTransient), errors.Is(err, ports.ErrSendUnknown):
		log.WarnContext(ctx, "transient failure", "procedure", procedure, "error", err)
		return connect.NewError(connect.CodeUnavailable, errors.New("temporarily unavailable, retry with the same request_id"))
	}
	log.ErrorContext(ctx, "internal error", "procedure", procedure, "error", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// businessMetadata returns the ErrorInfo metadata of a business error (nil
// when it has none) and the retry hint of a *ports.RetryAfterError (0
// without one): starts_at of a *ports.NotStartedError; release_in_flight
// and retry_after of ports.ErrReleaseInFlight.
func businessMetadata(err error) (map[string]string, time.Duration) {
	var ns *ports.NotStartedError
	if errors.As(err, &ns) {
		return map[string]string{MetadataStartsAt: ns.StartsAt.UTC().Format(time.RFC3339Nano)}, 0
	}
	if !errors.Is(err, ports.ErrReleaseInFlight) {
		return nil, 0
	}
	meta := map[string]string{MetadataReleaseInFlight: "true"}
	var ra *ports.RetryAfterError
	if errors.As(err, &ra) && ra.After > 0 {
		meta[MetadataRetryAfter] = ra.After.String()
		return meta, ra.After
	}
	return meta, 0
}

func addDetail(ce *connect.Error, m proto.Message) {
	if d, err := connect.NewErrorDetail(m); err == nil {
		ce.AddDetail(d)
	}
}

// replayRefusedMessage keeps the pre-check's explanation (it is written for
// operators and holds no internals) after the sentinel's text.
func replayRefusedMessage(err error) string {
	return "replay refused: " + err.Error()
}

// ErrorReason returns the google.rpc.ErrorInfo reason a Connect error of
// this API carries (SOLD_OUT, BACKLOG, ...), or "" when err is not a
// Connect error or has none: what a client of the API branches on.
func ErrorReason(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.GetReason()
			}
		}
	}
	return ""
}

// settingsConflict is the answer to a CreateActivity whose settings
// differ from the stored activity's: AlreadyExists naming each differing
// field with the stored and the asked value (the stored settings are the
// operator's own, no secret), and a google.rpc.ErrorInfo with reason
// ACTIVITY_EXISTS and metadata "fields" (comma-separated).
func settingsConflict(sc *ports.SettingsConflictError) error {
	parts := make([]string, len(sc.Fields))
	names := make([]string, len(sc.Fields))
	for i, d := range sc.Fields {
		parts[i] = fmt.Sprintf("%s: stored %s, asked %s", d.Field, d.Stored, d.Wanted)
		names[i] = d.Field
	}
	ce := connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
		"the activity exists with other settings (%s); change ends_at with UpdateActivity and the stock with AddStock or RemoveStock",
		strings.Join(parts, "; ")))
	addDetail(ce, &errdetails.ErrorInfo{Reason: ReasonActivityExists, Domain: ErrorDomain,
		Metadata: map[string]string{"fields": strings.Join(names, ",")}})
	return ce
}
