package benchenv

import (
	"path/filepath"
	"testing"

	"github.com/seckill-dev/seckill/adapters/kafka"
)

// TestBrokerStackProcess: scenario target "broker" faults the single
// Kafka node of the default stack, and the first node of Kafka's cluster
// mode when the stack's exports chose it (SECKILL_STACK_BROKER_CLUSTER).
func TestBrokerStackProcess(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SECKILL_STACK_DIR", dir)
	t.Setenv("SECKILL_STACK_BROKER_CLUSTER", "")
	name, file, err := BrokerStackProcess(kafka.PlugName, nil)
	if err != nil || name != "kafka" || file != filepath.Join(dir, "run", "kafka.pid") {
		t.Fatalf("default stack: %q %q %v", name, file, err)
	}
	t.Setenv("SECKILL_STACK_BROKER_CLUSTER", kafka.PlugName)
	name, file, err = BrokerStackProcess(kafka.PlugName, nil)
	if err != nil || name != "kafka-n1" || file != filepath.Join(dir, "kafka-cluster", "run", "kafka-n1.pid") {
		t.Fatalf("cluster mode: faults %q %q %v, want kafka-n1", name, file, err)
	}
}
