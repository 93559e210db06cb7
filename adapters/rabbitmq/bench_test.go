package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// BenchmarkSendLoop measures the synchronous send ceiling of one publisher
// with the default send timeout (benchkit.SendLoop, the loop of the RocketMQ
// adapter's benchmark and of seckill-bench), into one quorum queue:
// go test -run - -bench SendLoop ./adapters/rabbitmq/
func BenchmarkSendLoop(b *testing.B) {
	env := rabbittest.NewEnv(b, []ports.Subscription{{Group: "CG_CREATE", Topic: ports.TopicOrderCreate, MaxRetries: 5}})
	cfg := env.Config
	cfg.SendTimeout = 0
	pub, err := rabbitmq.NewPublisher(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := pub.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprint("workers=", workers), func(b *testing.B) {
			res, err := benchkit.SendLoop(context.Background(), pub, b.N, workers, func(i int) ports.OutboundMessage {
				return ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: fmt.Sprint("evt_", workers, "_", i),
					Tag: "CREATE_ORDER", Keys: []string{fmt.Sprint("rsv_", i)}, Body: make([]byte, 512)}
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.Rate(), "confirmed/s")
			b.ReportMetric(float64(res.Percentile(0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(res.Unknown)/float64(max(1, res.Sent())), "unknown-ratio")
		})
	}
}
