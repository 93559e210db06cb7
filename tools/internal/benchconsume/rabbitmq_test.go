package benchconsume

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
)

// TestConsumeRunsOnRabbitMQ: `seckill-bench consume` with
// SECKILL_BROKER=rabbitmq publishes through RabbitMQ, drains the messages
// with the RabbitMQ runner into PostgreSQL, names the broker in its
// header and reports a positive rate with the books holding. Behaviour
// only: no timing threshold.
func TestConsumeRunsOnRabbitMQ(t *testing.T) {
	t.Setenv("SECKILL_RABBITMQ_URL", rabbittest.URL(t))
	t.Setenv("SECKILL_BROKER", "rabbitmq")
	t.Setenv("SECKILL_LOG_LEVEL", "error")
	var buf bytes.Buffer
	err := Run(t.Context(), []string{"--messages", "200", "--batches", "16"}, &buf)
	out := buf.String()
	if err != nil {
		t.Fatalf("seckill-bench consume: %v\n%s", err, out)
	}
	if first, _, _ := strings.Cut(out, "\n"); !strings.Contains(first, "broker rabbitmq") {
		t.Errorf("the header does not name the broker: %q", first)
	}
	var row []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "batch 16 per transaction") {
			row = strings.Fields(strings.TrimPrefix(line, "batch 16 per transaction"))
		}
	}
	if len(row) < 3 {
		t.Fatalf("no row for batch 16:\n%s", out)
	}
	orders, _ := strconv.Atoi(row[0])
	rate, _ := strconv.ParseFloat(row[1], 64)
	if orders != 200 || rate <= 0 || !strings.Contains(out, "hold (orders = stock, final stock 0)") {
		t.Errorf("orders %d, rate %v, want 200 orders at a positive rate with the books holding:\n%s", orders, rate, out)
	}
	t.Logf("\n%s", out)
}
