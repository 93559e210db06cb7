package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/ports"
)

// TestTopologyApplyCheckAddGroup: on an empty prefix check lists every
// topic of the service as missing and changes nothing; apply creates
// exactly those, after which check finds none and a second apply changes
// nothing; add-group creates an outside group's retry and dead-letter
// topics once, and refuses a name or a bound it cannot take.
func TestTopologyApplyCheckAddGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := uniqPrefix()
	s := testSettings()
	admin, err := kafka.Plug{}.TopologyCommand().Open(s, brokerplug.TopologyOptions{Prefix: &prefix})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	targets, err := admin.Targets(ctx)
	if err != nil || len(targets) != 1 || targets[0].Name() != "" {
		t.Fatalf("Targets: %v, %d targets, want the one cluster", err, len(targets))
	}
	topo := targets[0]
	t.Cleanup(func() { closePrefix(t, s, prefix) })
	want := len(ports.Topics) + 2*len(ports.Subscriptions())
	for range 2 {
		diffs, err := topo.Check(ctx)
		if err != nil || len(diffs) != want || !strings.HasSuffix(diffs[0], ": missing") {
			t.Fatalf("check on an empty prefix: %v, %d differences, want %d: %q", err, len(diffs), want, diffs)
		}
	}
	if changed, err := topo.Apply(ctx); err != nil || len(changed) != want {
		t.Fatalf("apply: %v, %d changes, want %d", err, len(changed), want)
	}
	if diffs, err := topo.Check(ctx); err != nil || len(diffs) != 0 {
		t.Fatalf("check after apply: %v, %q", err, diffs)
	}
	if changed, err := topo.Apply(ctx); err != nil || len(changed) != 0 {
		t.Fatalf("apply again: %v, %q", err, changed)
	}
	for _, state := range []string{": declared", ": already declared"} {
		line, err := topo.AddGroup(ctx, "CG_OUTSIDE_V1", 3)
		if err != nil || !strings.Contains(line, prefix+"CG_OUTSIDE_V1"+state) {
			t.Fatalf("add-group: %v, %q, want %q", err, line, state)
		}
	}
	for _, bad := range []struct {
		name    string
		retries int
	}{{"CG OUT", 3}, {"CG_OUT_V1", 0}} {
		if _, err := topo.AddGroup(ctx, bad.name, bad.retries); !errors.Is(err, brokerplug.ErrInvalidTopology) {
			t.Errorf("add-group %q %d: %v, want ErrInvalidTopology", bad.name, bad.retries, err)
		}
	}
}

// closePrefix deletes every topic and group under prefix.
func closePrefix(t *testing.T, s kafka.Settings, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := kafka.Plug{}.NewNamespace(ctx, s, brokerplug.NamespaceOptions{Prefix: prefix})
	if err == nil {
		err = ns.Close(ctx)
	}
	if err != nil {
		t.Errorf("delete the topics of %s: %v", prefix, err)
	}
}
