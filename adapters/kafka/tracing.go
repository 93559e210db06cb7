package kafka

// tracerName is the instrumentation scope of the adapter's spans
// (brokerkit.StartSend, brokerkit.StartProcess).
const tracerName = "github.com/seckill-dev/seckill/adapters/kafka"
