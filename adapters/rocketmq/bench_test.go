package rocketmq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/benchkit"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

func orderCreate(i int) ports.OutboundMessage {
	return ports.OutboundMessage{
		Topic: ports.TopicOrderCreate, MessageID: fmt.Sprint("evt_", i), Tag: "CREATE_ORDER",
		Keys: []string{fmt.Sprint("rsv_", i)}, Body: make([]byte, 512),
	}
}

// BenchmarkSendLoop measures the synchronous send ceiling of one publisher
// with the default send timeout (the loop is benchkit.SendLoop, the one
// seckill-bench uses): go test -run - -bench SendLoop ./adapters/rocketmq/
func BenchmarkSendLoop(b *testing.B) {
	env := mqtest.NewEnv(b)
	pub, err := rocketmq.NewPublisher(env.Config, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := pub.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close() })
	for _, workers := range []int{1, 8, 32} {
		b.Run(fmt.Sprint("workers=", workers), func(b *testing.B) {
			res, err := benchkit.SendLoop(context.Background(), pub, b.N, workers, orderCreate)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.Rate(), "confirmed/s")
			b.ReportMetric(float64(res.Percentile(0.99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(res.Unknown)/float64(max(1, res.Sent())), "unknown-ratio")
		})
	}
}
