package ports

import (
	"context"
	"strconv"
	"time"
)

// MessagingStatus reports the live state of the messaging side to
// operators (the status page): per consumer group, how far behind it is
// and how much it holds; per broker endpoint, the publisher's circuit
// breaker; and the send timeout in force. Every broker adapter provides
// one. A figure the adapter does not measure is absent (nil or empty),
// never reported as zero, so that a reader can tell "none" from "unknown".
type MessagingStatus interface {
	// MessagingSnapshot returns the figures as of now, bounded by ctx. It
	// returns an error when the figures could not be read at all; a
	// snapshot returned with an error holds what was read before the
	// failure.
	MessagingSnapshot(ctx context.Context) (MessagingSnapshot, error)
}

// MessagingSnapshot is one reading of a MessagingStatus.
type MessagingSnapshot struct {
	// Groups are the consumer groups with at least one figure, by
	// physical group name, sorted by name.
	Groups []GroupFigures
	// BrokerFiguresUp reports whether the last read of the broker's own
	// figures (ready, lag) succeeded; nil when the adapter reads none.
	BrokerFiguresUp *bool
	// Breakers are the publisher's circuit breakers, one per endpoint,
	// sorted by endpoint; empty when the adapter has none.
	Breakers []BreakerFigure
	// SendTimeout is the adaptive send timeout in force; nil when the
	// adapter does not adapt it.
	SendTimeout *time.Duration
}

// GroupFigures are one consumer group's figures; nil when not measured.
type GroupFigures struct {
	Group string
	// LagSeconds is the age of the group's oldest message not yet
	// acknowledged (0 when there is none).
	LagSeconds *float64
	// Ready counts messages stored for the group and not yet delivered.
	Ready *float64
	// LagMessages counts messages not yet acknowledged: ready plus
	// delivered and unacknowledged.
	LagMessages *float64
	// Inflight counts messages this process received and has not settled.
	Inflight *float64
}

// BreakerFigure is the publisher's circuit breaker of one endpoint.
type BreakerFigure struct {
	Endpoint string
	State    BreakerState
}

// BreakerState is a circuit breaker's state; its values are those of the
// mq_breaker_state gauge.
type BreakerState int

// The states of a circuit breaker.
const (
	// BreakerClosed lets every send through.
	BreakerClosed BreakerState = 0
	// BreakerHalfOpen lets probes through to learn whether the endpoint
	// answers again.
	BreakerHalfOpen BreakerState = 1
	// BreakerOpen refuses sends without trying them.
	BreakerOpen BreakerState = 2
)

// String names the state: closed, half-open, open, or "unknown (N)".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "unknown (" + strconv.Itoa(int(s)) + ")"
}
