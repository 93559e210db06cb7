package chaos

import (
	"testing"

	"github.com/seckill-dev/seckill/bootstrap/config"
)

// TestFaultsOwnProcess: a scenario naming a broker's process (the
// proxy, the name server) runs only on the broker whose local stack runs
// that process; the service, the stores and "the broker" are every
// broker's.
func TestFaultsOwnProcess(t *testing.T) {
	t.Setenv("SECKILL_STACK_DIR", t.TempDir())
	t.Setenv("SECKILL_ROCKETMQ_CLUSTER_DIR", "")
	t.Setenv("SECKILL_STACK_BROKER_CLUSTER", "")
	for _, c := range []struct {
		broker, scenario string
		want             bool
	}{
		{"rocketmq", "kill-proxy", true}, {"rocketmq", "pause-namesrv", true}, {"kafka", "kill-proxy", false},
		{"rabbitmq", "kill-namesrv", false}, {"kafka", "kill-broker", true}, {"kafka", "kill-redis", true},
		{"rabbitmq", "kill-service", true},
	} {
		cfg := config.Config{Broker: config.Broker{Name: c.broker}}
		if got := faultsOwnProcess(c.scenario, cfg); got != c.want {
			t.Errorf("%s on %s: faultsOwnProcess = %t, want %t", c.scenario, c.broker, got, c.want)
		}
	}
}
