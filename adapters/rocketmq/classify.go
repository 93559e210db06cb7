package rocketmq

import (
	"context"
	"errors"
	"strings"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
)

// Send outcomes (spec 11.2), the values of the outcome label and of the
// send_outcome log field.
const (
	OutcomeConfirmed       = brokerkit.OutcomeConfirmed
	OutcomeUnknown         = brokerkit.OutcomeUnknown
	OutcomeDefiniteFailure = brokerkit.OutcomeDefiniteFailure
)

// codeMessageBodyEmpty is MESSAGE_BODY_EMPTY, which the proxy returns for an
// empty body but which the v5.1.2 client's enum does not name.
const codeMessageBodyEmpty = 41302

// isDefiniteCode reports the proxy status codes of a send that was rejected
// before anything was stored and that would be rejected again if the same
// message were resent: the request itself (topic, message, credentials) is
// wrong. Everything else is UNKNOWN (see classifySend).
func isDefiniteCode(code int32) bool {
	switch code {
	case
		int32(v2.Code_BAD_REQUEST),
		int32(v2.Code_ILLEGAL_ACCESS_POINT),
		int32(v2.Code_ILLEGAL_TOPIC),
		int32(v2.Code_ILLEGAL_CONSUMER_GROUP),
		int32(v2.Code_ILLEGAL_MESSAGE_TAG),
		int32(v2.Code_ILLEGAL_MESSAGE_KEY),
		int32(v2.Code_ILLEGAL_MESSAGE_GROUP),
		int32(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY),
		int32(v2.Code_INVALID_TRANSACTION_ID),
		int32(v2.Code_ILLEGAL_MESSAGE_ID),
		int32(v2.Code_ILLEGAL_FILTER_EXPRESSION),
		int32(v2.Code_ILLEGAL_INVISIBLE_TIME),
		int32(v2.Code_ILLEGAL_DELIVERY_TIME),
		int32(v2.Code_INVALID_RECEIPT_HANDLE),
		int32(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
		int32(v2.Code_UNRECOGNIZED_CLIENT_TYPE),
		int32(v2.Code_MESSAGE_CORRUPTED),
		int32(v2.Code_CLIENT_ID_REQUIRED),
		int32(v2.Code_UNAUTHORIZED),
		int32(v2.Code_PAYMENT_REQUIRED),
		int32(v2.Code_FORBIDDEN),
		int32(v2.Code_NOT_FOUND),
		int32(v2.Code_TOPIC_NOT_FOUND),
		int32(v2.Code_CONSUMER_GROUP_NOT_FOUND),
		int32(v2.Code_PAYLOAD_TOO_LARGE),
		int32(v2.Code_MESSAGE_BODY_TOO_LARGE),
		codeMessageBodyEmpty,
		int32(v2.Code_REQUEST_HEADER_FIELDS_TOO_LARGE),
		int32(v2.Code_MESSAGE_PROPERTIES_TOO_LARGE),
		int32(v2.Code_NOT_IMPLEMENTED),
		int32(v2.Code_UNSUPPORTED),
		int32(v2.Code_VERSION_UNSUPPORTED),
		int32(v2.Code_VERIFY_FIFO_MESSAGE_UNSUPPORTED):
		return true
	}
	return false
}

// definiteClientErrors returns the substrings of the plain fmt errors the v5.1.2
// client returns before sending anything, for a condition that resending the
// same message cannot fix. The library gives them no type or sentinel, so
// string matching is the only way; each is quoted from its source:
//
//   - producer.go send1: "current message type not match with topic accept
//     message types" (FIFO/DELAY/NORMAL message sent to a topic of another
//     type; checked against the route before any request);
//   - publishing_message.go: "message body size exceeds the threshold"
//     (body above the server-issued max body size, 4 MiB);
//   - producer.go send0: "no broker available to sendMessage" (the route has
//     no writable queue);
//   - client.go queryRoute: "rocketmq: no available brokers" (the route has
//     no queue at all);
//   - publishing_message.go: "transactional message should not set" and
//     producer.go: "messages to send have different" (malformed batches;
//     unreachable through Publish, listed for completeness).
//
// "producer is not running" (Send after GracefulStop or before Start) is
// deliberately NOT definite: nothing was stored, but the same message will
// be stored once a running producer resends it, so compensating would turn
// a shutdown race into a lost order.
func definiteClientErrors() []string {
	return []string{
		"current message type not match with topic accept message types",
		"message body size exceeds the threshold",
		"no broker available to sendMessage",
		"rocketmq: no available brokers",
		"transactional message should not set",
		"messages to send have different",
	}
}

// classifySend maps a Send error to an outcome and an error class (the
// error_class log field: a proxy code name, a gRPC code, a context error or
// CLIENT_ERROR).
//
// Only failures that are both certainly not stored and certain to fail again
// for the same message are DEFINITE_FAILURE (the caller compensates). All
// others are UNKNOWN (the caller keeps the reservation pending and resends
// with the same message_id), including:
//   - deadline exceeded / canceled, gRPC Unavailable, DeadlineExceeded and
//     other transport errors: the request may have reached the broker;
//   - 50001 INTERNAL_SERVER_ERROR (also every unmapped broker error), 50400
//     PROXY_TIMEOUT, 50401/50402 persistence timeouts and 50002
//     HA_NOT_AVAILABLE: the broker may have stored the message (the last
//     three say it did, without the requested durability);
//   - 42900 TOO_MANY_REQUESTS (broker flow control) and 40800
//     REQUEST_TIMEOUT: not stored, but a resend after backoff succeeds, so
//     compensating would fail an order that can still be created; the
//     resend path is exactly the right reaction;
//   - any code or error not listed above (the port's contract: unknown
//     errors count as UNKNOWN).
func classifySend(err error) (outcome, errorClass string) {
	if err == nil {
		return OutcomeConfirmed, ""
	}
	var rs *rmq.ErrRpcStatus
	if errors.As(err, &rs) {
		class := v2.Code(rs.Code).String()
		if rs.Code == codeMessageBodyEmpty {
			class = "MESSAGE_BODY_EMPTY"
		}
		if isDefiniteCode(rs.Code) {
			return OutcomeDefiniteFailure, class
		}
		return OutcomeUnknown, class
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeUnknown, "DEADLINE_EXCEEDED"
	case errors.Is(err, context.Canceled):
		return OutcomeUnknown, "CANCELED"
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.ResourceExhausted, // message above the gRPC size cap (client 2 MiB, checked before sending)
			codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
			return OutcomeDefiniteFailure, "GRPC_" + st.Code().String()
		}
		return OutcomeUnknown, "GRPC_" + st.Code().String()
	}
	msg := err.Error()
	for _, s := range definiteClientErrors() {
		if strings.Contains(msg, s) {
			return OutcomeDefiniteFailure, "CLIENT_REJECTED"
		}
	}
	return OutcomeUnknown, "CLIENT_ERROR"
}
