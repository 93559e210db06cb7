package rabbitmq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// TestTopologyDeclareCheck: the production topology (the business groups
// of ports.Subscriptions) declared twice checks clean; a deleted exchange,
// a deleted queue and a queue re-created with other arguments are exactly
// what Check reports; Declare recreates the missing ones, refuses the
// changed one (406) until it is removed, and then the namespace checks
// clean again.
func TestTopologyDeclareCheck(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, ports.Subscriptions())
	topo := env.Topology()
	ctx := context.Background()
	if err := rabbitmq.Declare(ctx, env.Config, topo); err != nil {
		t.Fatalf("second Declare: %v", err)
	}
	diffs, err := rabbitmq.Check(ctx, env.Config, topo)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("Check after Declare: %v %v, want none", diffs, err)
	}

	create, _ := topo.Group(ports.GroupOrderCreate)
	audit, _ := topo.Group(ports.GroupAudit)
	event, _ := topo.Topic(ports.TopicOrderEvent)
	conn, err := amqp.Dial(env.Config.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(create.Queues[0], false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete(event.Exchange, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(audit.Queues[0], false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(audit.Queues[0], true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	diffs, err = rabbitmq.Check(ctx, env.Config, topo)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range diffs {
		got = append(got, fmt.Sprintf("%s %s %v", d.Kind, d.Name, strings.Contains(d.Problem, "PRECONDITION_FAILED")))
	}
	// In the topology's order: topic exchanges, then the groups of
	// ports.Subscriptions (order-create before audit).
	want := []string{"exchange " + event.Exchange + " false", "queue " + create.Queues[0] + " false", "queue " + audit.Queues[0] + " true"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Check found %v (%v), want %v", got, diffs, want)
	}
	if err := rabbitmq.Declare(ctx, env.Config, topo); err == nil || !strings.Contains(err.Error(), audit.Queues[0]) {
		t.Fatalf("Declare over a queue with other arguments: %v, want a 406 naming %s", err, audit.Queues[0])
	}
	if _, err := ch.QueueDelete(audit.Queues[0], false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := rabbitmq.Declare(ctx, env.Config, topo); err != nil {
		t.Fatalf("Declare after removing the changed queue: %v", err)
	}
	if diffs, err := rabbitmq.Check(ctx, env.Config, topo); err != nil || len(diffs) != 0 {
		t.Fatalf("Check after the repair: %v %v, want none", diffs, err)
	}
}
