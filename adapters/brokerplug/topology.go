package brokerplug

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// TopologySub names a subcommand of `seckill topology`, so that a broker
// declares on each the flags of its own that apply there.
type TopologySub string

// The subcommands of `seckill topology`.
const (
	// TopologyApply creates what is missing.
	TopologyApply TopologySub = "apply"
	// TopologyCheck lists the differences.
	TopologyCheck TopologySub = "check"
	// TopologyShow prints the topology without contacting the broker.
	TopologyShow TopologySub = "show"
	// TopologyAddGroup registers an outside consumer group.
	TopologyAddGroup TopologySub = "add-group"
)

// TopologyCommand is a broker's part of one `seckill topology` subcommand:
// the flags of its own (a broker whose resources live on several nodes
// may let the operator choose one; one whose resources have a shape may
// let the operator change it) and the administration built from them.
// Plug.TopologyCommand returns a new one per subcommand; it holds the
// flags' values.
type TopologyCommand interface {
	// DeclareFlags adds the broker's own flags of subcommand sub to fs
	// (none for most brokers). The command parses them before it calls
	// Open. A flag's name never collides with the command's own: --prefix,
	// --timeout, and add-group's --retry-max.
	DeclareFlags(fs *flag.FlagSet, sub TopologySub)
	// Open returns the administration of the broker's resources for
	// settings s (what Plug.ReadSettings returned, validated), o and the
	// parsed flags. It does not contact the broker. A flag value or an
	// option it cannot take is an error matching ErrInvalidTopology.
	Open(s Settings, o TopologyOptions) (Topology, error)
}

// Topology administers a broker's resources (every topic, queue and
// consumer group a service uses, dead-letter resources included) for one
// set of settings: what `seckill topology apply|check|show|add-group`
// does. The resources come from ports/subscriptions.go, as the broker's
// Start creates them.
type Topology interface {
	// Show writes the resources the topology holds with their settings,
	// as aligned text tables, without contacting the broker.
	Show(w io.Writer) error
	// Targets returns where apply, check and add-group work: one target
	// for a broker whose nodes share their resources (Kafka, RabbitMQ);
	// for one whose every node holds its own copy of them (RocketMQ's
	// masters), each node, or the one the flags select. An error when
	// the nodes cannot be listed.
	Targets(ctx context.Context) ([]TopologyTarget, error)
}

// TopologyTarget is one place a topology lives (Topology.Targets).
type TopologyTarget interface {
	// Name labels the target's lines when a command works on several
	// ("broker-a"); empty when the target was asked for alone, whose
	// output is then unlabeled and whose error is the command's.
	Name() string
	// Summary names, in a few words, what the topology holds and where
	// (counts, prefix, address), for the command's summary line.
	Summary() string
	// Apply creates what is missing or differs (idempotent: on a target
	// that matches it changes nothing) and returns one line per change it
	// made; a broker that cannot tell cheaply may return none.
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

// TopologyOptions shapes TopologyCommand.Open.
type TopologyOptions struct {
	// Prefix, when not nil, replaces the settings' name prefix.
	Prefix *string
}

// ErrInvalidTopology marks a topology request the broker cannot take as
// asked (the command reports it as a usage error).
var ErrInvalidTopology = errors.New("invalid topology request")

// SingleTarget is the Targets of a broker whose topology has one target:
// t itself.
func SingleTarget(t TopologyTarget) []TopologyTarget { return []TopologyTarget{t} }

// Outside consumer groups: groups of other teams' consumers of the
// ORDER_EVENT topic, registered by `seckill topology add-group`.
const (
	// OutsideGroupRetries is the default retry count of an outside group
	// (add-group's --retry-max): RocketMQ's default retryMaxTimes, kept
	// for every broker.
	OutsideGroupRetries = 16
	// ReservedGroupPrefix starts the base names of the service's own
	// consumer groups; an outside group may not use it.
	ReservedGroupPrefix = "CG_SECKILL_"
)

// validGroupName is the name rule every broker takes: letters, digits,
// '_' and '-'.
var validGroupName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// CheckOutsideGroupName reports whether name (without the environment
// prefix) may be an outside consumer group on any broker: not empty, only
// letters, digits, '_' and '-', and not a name of the service's own groups
// (ReservedGroupPrefix, compared without case). The error says which rule
// the name breaks; a broker may refuse more (its system groups).
func CheckOutsideGroupName(name string) error {
	switch {
	case name == "":
		return errors.New("the group name is empty")
	case !validGroupName.MatchString(name):
		return fmt.Errorf("group name %q may only contain letters, digits, '_' and '-'", name)
	case strings.HasPrefix(strings.ToUpper(name), ReservedGroupPrefix):
		return fmt.Errorf("group name %q is reserved: names starting with %s are the service's own consumer groups", name, ReservedGroupPrefix)
	}
	return nil
}
