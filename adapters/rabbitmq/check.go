package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/ports"
)

// Difference is one way a virtual host does not match a Topology.
type Difference struct {
	// Kind is "exchange" or "queue".
	Kind string
	// Name is the resource's name.
	Name string
	// Problem is "missing" or the broker's refusal of the topology's
	// arguments (406 PRECONDITION_FAILED: the resource exists with other
	// arguments or another type).
	Problem string
}

// String reads as "queue X: missing".
func (d Difference) String() string { return d.Kind + " " + d.Name + ": " + d.Problem }

// Check compares the virtual host of cfg.URL with t without changing it
// and returns every difference: each exchange and queue is looked up with
// a passive declaration (404 = missing) and, when it exists, declared
// again with the topology's type and arguments, which the broker accepts
// unchanged when they match and refuses with 406 otherwise (an existing
// resource is never modified by a declaration). Bindings cannot be read
// over AMQP and are not checked; Declare (re)creates them.
func Check(ctx context.Context, cfg Config, t Topology) ([]Difference, error) {
	conn, err := dial(ctx, cfg.withDefaults(), "seckill-topology-check", false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	var diffs []Difference
	for _, r := range t.resources() {
		problem, err := checkOne(conn, r)
		if err != nil {
			return diffs, err
		}
		if problem != "" {
			diffs = append(diffs, Difference{Kind: r.kind, Name: r.name, Problem: problem})
		}
	}
	return diffs, nil
}

// resource is one exchange or queue of the topology with its declaration.
type resource struct {
	kind, name, exchangeType string
	args                     amqp.Table
}

// resources lists the topology's exchanges and queues with the type and
// arguments Declare gives them.
func (t Topology) resources() []resource {
	out := []resource{
		{kind: "exchange", name: t.Unroutable(), exchangeType: amqp.ExchangeFanout},
		{kind: "queue", name: t.Unroutable(), args: quorum(nil)},
		{kind: "exchange", name: t.Redeliver(), exchangeType: amqp.ExchangeDirect},
		{kind: "exchange", name: t.Dead(), exchangeType: amqp.ExchangeDirect},
	}
	for _, d := range Tiers() {
		out = append(out, resource{kind: "exchange", name: t.Tier(d), exchangeType: amqp.ExchangeFanout},
			resource{kind: "queue", name: t.Tier(d), args: t.tierArgs(d.Milliseconds())})
	}
	for _, s := range t.Topics {
		typ := amqp.ExchangeFanout
		if s.Kind == ports.TopicOrdered {
			typ = amqp.ExchangeDirect
		}
		out = append(out, resource{kind: "exchange", name: s.Exchange, exchangeType: typ, args: amqp.Table{"alternate-exchange": t.Unroutable()}})
	}
	for _, g := range t.Groups {
		out = append(out, resource{kind: "queue", name: g.DLQ, args: quorum(nil)})
		for _, q := range g.Queues {
			out = append(out, resource{kind: "queue", name: q, args: t.groupQueueArgs(g)})
		}
	}
	return out
}

// checkOne checks one resource on a channel of its own (a refused
// declaration closes the channel).
func checkOne(conn *amqp.Connection, r resource) (string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("open channel: %w", err)
	}
	defer func() {
		if !ch.IsClosed() {
			_ = ch.Close()
		}
	}()
	if r.kind == "exchange" {
		err = ch.ExchangeDeclarePassive(r.name, r.exchangeType, true, false, false, false, nil)
	} else {
		_, err = ch.QueueDeclarePassive(r.name, true, false, false, false, nil)
	}
	if problem, err := classifyDeclare(err, "missing"); problem != "" || err != nil {
		return problem, err
	}
	ch2, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("open channel: %w", err)
	}
	defer func() {
		if !ch2.IsClosed() {
			_ = ch2.Close()
		}
	}()
	if r.kind == "exchange" {
		err = ch2.ExchangeDeclare(r.name, r.exchangeType, true, false, false, false, r.args)
	} else {
		_, err = ch2.QueueDeclare(r.name, true, false, false, false, r.args)
	}
	return classifyDeclare(err, "")
}

// classifyDeclare turns a declaration's channel error into a problem: 404
// is notFound, 406 the broker's text; other errors are returned.
func classifyDeclare(err error, notFound string) (string, error) {
	if err == nil {
		return "", nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.NotFound:
			if notFound != "" {
				return notFound, nil
			}
		case amqp.PreconditionFailed:
			return strings.TrimSpace(ae.Reason), nil
		}
	}
	return "", err
}
