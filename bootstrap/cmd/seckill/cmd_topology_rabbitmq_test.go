package main

import (
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/bootstrap/clikit"
	"github.com/seckill-dev/seckill/ports"
)

// TestTopologyCommandOnRabbitMQ: with SECKILL_BROKER=rabbitmq, check lists
// every exchange and queue missing from an empty namespace and exits 1
// without creating anything; on a declared namespace apply is idempotent
// and check finds it matching.
func TestTopologyCommandOnRabbitMQ(t *testing.T) {
	t.Setenv("SECKILL_BROKER", "rabbitmq")
	t.Setenv("SECKILL_RABBITMQ_URL", rabbittest.URL(t))

	empty := "E" + strings.ReplaceAll(t.Name(), "/", "_") + "."
	t.Setenv("SECKILL_RABBITMQ_PREFIX", empty)
	for range 2 { // check changes nothing: the second run finds the same
		out, _, err := execute(t, "topology", "check")
		if clikit.ExitCode(err) != 1 || !strings.Contains(out, "queue "+empty+string(ports.GroupOrderCreate)+": missing") ||
			!strings.Contains(out, "exchange "+empty+"PROD_SECKILL_ORDER_CREATE_V1: missing") {
			t.Fatalf("check of an empty namespace: %v (exit %d)\n%s", err, clikit.ExitCode(err), out)
		}
	}

	env := rabbittest.NewEnv(t, ports.Subscriptions())
	t.Setenv("SECKILL_RABBITMQ_PREFIX", env.Config.Prefix)
	for _, cmd := range []string{"apply", "check", "apply"} {
		out, _, err := execute(t, "topology", cmd)
		if err != nil || !strings.Contains(out, "5 exchanges and 5 groups") {
			t.Fatalf("%s on a declared namespace: %v\n%s", cmd, err, out)
		}
	}
}
