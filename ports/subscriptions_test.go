package ports_test

import (
	"testing"

	"github.com/seckill-dev/seckill/ports"
)

// TestTopologyIsComplete: every logical topic has one definition with a
// unique name, every business group consumes a defined topic and has a
// unique name, and exactly the FIFO topic is consumed in order.
func TestTopologyIsComplete(t *testing.T) {
	names := map[string]bool{}
	for _, topic := range ports.Topics {
		spec, err := ports.SpecOf(topic)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Name == "" || names[spec.Name] {
			t.Errorf("topic %s: name %q empty or repeated", topic, spec.Name)
		}
		names[spec.Name] = true
	}
	if len(ports.TopicSpecs()) != len(ports.Topics) {
		t.Errorf("%d topic specs for %d topics", len(ports.TopicSpecs()), len(ports.Topics))
	}
	if _, err := ports.SpecOf("NO_SUCH_TOPIC"); err == nil {
		t.Error("SpecOf accepted an unknown topic")
	}
	groups := map[ports.ConsumerGroup]bool{}
	for _, s := range ports.Subscriptions() {
		spec, err := ports.SpecOf(s.Topic)
		if err != nil {
			t.Errorf("group %s: %v", s.Group, err)
		}
		if groups[s.Group] {
			t.Errorf("group %s defined twice", s.Group)
		}
		groups[s.Group] = true
		if s.Ordered != (spec.Kind == ports.TopicOrdered) {
			t.Errorf("group %s: ordered %v on a %s topic", s.Group, s.Ordered, spec.Kind)
		}
		if s.MaxRetries < 1 {
			t.Errorf("group %s: %d retries", s.Group, s.MaxRetries)
		}
		if got, ok := ports.SubscriptionOf(s.Group); !ok || got != s {
			t.Errorf("SubscriptionOf(%s) = %+v, %v", s.Group, got, ok)
		}
	}
	if _, ok := ports.SubscriptionOf("CG_NOBODY"); ok {
		t.Error("SubscriptionOf accepted an unknown group")
	}
}
