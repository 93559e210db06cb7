package brokerplug

import (
	"context"
	"errors"
)

// Topology administers a broker's resources (every topic, queue and
// consumer group a service uses, dead-letter resources included) for one
// set of settings: what `seckill topology apply|check|add-group` does on
// a broker whose plug provides it (Plug.Topology). The resources come
// from ports/subscriptions.go, as the broker's Start creates them.
type Topology interface {
	// Summary names, in a few words, what the topology holds and where
	// (counts, prefix, broker), for the command's summary line.
	Summary() string
	// Apply creates what is missing (idempotent: on a broker that
	// matches it changes nothing) and returns one line per change it
	// made; a broker that cannot do that cheaply may return none.
	Apply(ctx context.Context) ([]string, error)
	// Check changes nothing and returns every difference from the
	// topology, one line each ("topic X: missing").
	Check(ctx context.Context) ([]string, error)
	// AddGroup creates the consumer group name, outside the service's
	// own, of the ORDER_EVENT topic (for a projection of another team),
	// dead-lettering a message after retries redeliveries, and returns
	// one line saying what it did ("declared", "already declared:
	// nothing changed"). Idempotent. A name or a count the broker cannot
	// take is an error matching ErrInvalidTopology.
	AddGroup(ctx context.Context, name string, retries int) (string, error)
}

// TopologyOptions shapes Plug.Topology.
type TopologyOptions struct {
	// Prefix, when not nil, replaces the settings' name prefix.
	Prefix *string
}

// ErrInvalidTopology marks a topology request the broker cannot take as
// asked (the command reports it as a usage error).
var ErrInvalidTopology = errors.New("invalid topology request")
