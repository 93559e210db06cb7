package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/ports"
)

// TestSettingsValidate: every bad setting is reported naming its variable;
// the defaults are valid.
func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	good := kafka.Settings{Brokers: []string{"127.0.0.1:9092"}, Prefix: "T1a_b.c-d", Partitions: 8, Replication: 1, RetryDelay: time.Second}
	if errs := good.Validate(); len(errs) != 0 {
		t.Fatalf("valid settings: %v", errs)
	}
	cases := map[string]func(s *kafka.Settings){
		"SECKILL_KAFKA_BROKERS":      func(s *kafka.Settings) { s.Brokers = []string{"no-port"} },
		"SECKILL_KAFKA_PREFIX":       func(s *kafka.Settings) { s.Prefix = "bad/prefix" },
		"SECKILL_KAFKA_PARTITIONS":   func(s *kafka.Settings) { s.Partitions = 0 },
		"SECKILL_KAFKA_REPLICATION":  func(s *kafka.Settings) { s.Replication = 0 },
		"SECKILL_KAFKA_REDELIVERIES": func(s *kafka.Settings) { s.Redeliveries = -1 },
		"SECKILL_KAFKA_RETRY_DELAY":  func(s *kafka.Settings) { s.RetryDelay = 0 },
	}
	for name, breakIt := range cases {
		s := good
		breakIt(&s)
		errs := s.Validate()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), name) {
			t.Errorf("%s broken: errors %v, want one naming it", name, errs)
		}
	}
	if errs := (kafka.Settings{}).Validate(); len(errs) < 4 {
		t.Errorf("zero settings: %d errors %v, want one per missing setting", len(errs), errs)
	}
	if _, err := (kafka.Plug{}).Open(kafka.Settings{}, brokerplug.Deps{}); err == nil {
		t.Error("Open accepted invalid settings")
	}
}

// TestDeliverAtRejected: Kafka has no delayed delivery; a message with a
// DeliverAt is refused as definitely not stored, without reaching the
// broker.
func TestDeliverAtRejected(t *testing.T) {
	t.Parallel()
	s := testSettings()
	s.Brokers = []string{"127.0.0.1:1"}
	b, err := kafka.Plug{}.Open(s, brokerplug.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	_, err = b.Publish(t.Context(), ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: "m1", Body: []byte("x"),
		DeliverAt: time.Now().Add(time.Minute)})
	if !errors.Is(err, ports.ErrSendRejected) || errors.Is(err, ports.ErrSendUnknown) {
		t.Fatalf("publish with DeliverAt: %v, want ErrSendRejected only", err)
	}
	if b.Features().DelayedDelivery {
		t.Fatal("the Kafka broker declares delayed delivery")
	}
}

// TestUnreachableBrokerIsUnknown: a send to an address nothing listens on
// ends within its send timeout with an error matching ErrSendUnknown (a
// record could be written later), never ErrSendRejected; after a few
// such sends the broker is reported unavailable.
func TestUnreachableBrokerIsUnknown(t *testing.T) {
	t.Parallel()
	s := testSettings()
	s.Brokers = []string{"127.0.0.1:1"}
	b, err := kafka.Plug{}.Open(s, brokerplug.Deps{Neutral: brokerplug.Neutral{SendTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		_, err := b.Publish(ctx, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: fmt.Sprint("m", i), Body: []byte("x")})
		if !errors.Is(err, ports.ErrSendUnknown) || errors.Is(err, ports.ErrSendRejected) {
			t.Fatalf("send %d to an unreachable broker: %v, want ErrSendUnknown only", i, err)
		}
		if ctx.Err() != nil {
			t.Fatal("the send was not bounded by the send timeout")
		}
	}
	if ok, _ := b.BrokerAvailable(); ok {
		t.Error("the broker is reported available after three failed sends")
	}
}

// TestDeadLetterAfterBound: a message a group never acknowledges is
// delivered 1+Redeliveries times (through the retry topic), then written
// to the group's dead-letter topic, where the dead-letter reader receives
// it with its origin (the group's physical name and its delivery count).
func TestDeadLetterAfterBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSettings(), 2)
	sub, _ := ports.SubscriptionOf(ports.GroupAudit)
	var got recorder
	e.consume(t, sub, got.handler(func(ports.Delivery) ports.Decision { return ports.RetryLater("transient", 0) }))
	type dead struct {
		d      ports.Delivery
		origin ports.DeadLetterOrigin
		ok     bool
	}
	var mu sync.Mutex
	var deads []dead
	var originOf func(ports.Delivery) (ports.DeadLetterOrigin, bool)
	loop, err := e.broker.DeadLetterReader(func(origin func(ports.Delivery) (ports.DeadLetterOrigin, bool)) ports.BatchHandler {
		originOf = origin
		return handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
			mu.Lock()
			defer mu.Unlock()
			out := make([]ports.Decision, len(ds))
			for i, d := range ds {
				o, ok := origin(d)
				deads = append(deads, dead{d, o, ok})
				out[i] = ports.Acked("dead_letter")
			}
			return out
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, loop)
	id := "evt_dead_" + uniqPrefix()
	if _, err := e.broker.Publish(t.Context(), ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: id, Tag: "ORDER_CREATED",
		Body: []byte("dead")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(deads)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no dead letter within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	dl := deads[0]
	mu.Unlock()
	attempts := got.waitFor(t, time.Second, "three deliveries", func(ds []ports.Delivery) bool { return len(ds) >= 3 })
	for i, d := range attempts {
		if d.DeliveryAttempt != int32(i+1) {
			t.Errorf("delivery %d has attempt %d", i+1, d.DeliveryAttempt)
		}
	}
	want := ports.DeadLetterOrigin{Group: e.broker.Group(ports.GroupAudit), Deliveries: 3}
	if !dl.ok || dl.origin != want || dl.d.Properties["message_id"] != id || string(dl.d.Body) != "dead" {
		t.Errorf("dead letter %s origin %+v (%v), want %s from %+v", dl.d.Properties["message_id"], dl.origin, dl.ok, id, want)
	}
	if _, ok := originOf(ports.Delivery{BrokerMessageID: "x/0/1"}); ok {
		t.Error("a delivery that is not a dead letter being handled has an origin")
	}
}

// TestOrderedInPlaceRedelivery: on the FIFO topic a message of one key
// that is not acknowledged is redelivered in place (attempt+1) before any
// later message of that key is delivered.
func TestOrderedInPlaceRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testSettings(), 0)
	sub, _ := ports.SubscriptionOf(ports.GroupOrderProjection)
	run := uniqPrefix()
	ids := []string{run + "1", run + "2", run + "3", run + "4"}
	var got recorder
	e.consume(t, sub, got.handler(func(d ports.Delivery) ports.Decision {
		if d.Properties["message_id"] == ids[1] && d.DeliveryAttempt < 3 {
			return ports.RetryLater("transient", 100*time.Millisecond)
		}
		return ports.Acked("projected")
	}))
	for _, id := range ids {
		if _, err := e.broker.Publish(t.Context(), ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: id,
			MessageGroup: "ord_" + run, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	ds := got.waitFor(t, 30*time.Second, "every message acknowledged", func(ds []ports.Delivery) bool { return len(ds) >= 6 })
	var seq []string
	for _, d := range ds {
		seq = append(seq, fmt.Sprintf("%s#%d", strings.TrimPrefix(d.Properties["message_id"], run), d.DeliveryAttempt))
	}
	if want := []string{"1#1", "2#1", "2#2", "2#3", "3#1", "4#1"}; !slices.Equal(seq, want) {
		t.Fatalf("deliveries %v, want %v", seq, want)
	}
}

// TestNamespaceCloseDeletesTopics: a namespace's topics exist after
// NewNamespace and are gone after Close; its Env names the broker.
func TestNamespaceCloseDeletesTopics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ns, err := kafka.Plug{}.NewNamespace(ctx, testSettings(), brokerplug.NamespaceOptions{Prefix: uniqPrefix(), Redeliveries: 2})
	if err != nil {
		t.Fatalf("kafka namespace on %s (is Kafka running?): %v", brokersEnv(), err)
	}
	env := strings.Join(ns.Env(), " ")
	for _, want := range []string{"SECKILL_BROKER=kafka", "SECKILL_KAFKA_PREFIX=" + ns.Prefix(), "SECKILL_KAFKA_REDELIVERIES=2"} {
		if !strings.Contains(env, want) {
			t.Errorf("Env %q lacks %s", env, want)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokersEnv(), ",")...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	count := func() int {
		t.Helper()
		details, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range details.Names() {
			if strings.HasPrefix(name, ns.Prefix()) {
				n++
			}
		}
		return n
	}
	if n, want := count(), len(ports.Topics)+2*len(ports.Subscriptions()); n != want {
		t.Fatalf("%d topics under %s after NewNamespace, want %d", n, ns.Prefix(), want)
	}
	if err := ns.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A deletion completes asynchronously on the broker: wait, bounded.
	for n := count(); n != 0; n = count() {
		if ctx.Err() != nil {
			t.Fatalf("%d topics left under %s after Close", n, ns.Prefix())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
