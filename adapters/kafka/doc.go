// Package kafka is the Kafka adapter: it implements ports.Publisher and
// drives ports.BatchHandler consumers with franz-go
// (github.com/twmb/franz-go/pkg/kgo v1.22.3, pkg/kadm v1.20.0), behind the
// same ports and brokerplug contract as the RabbitMQ and RocketMQ adapters.
//
//   - Topics: <prefix><TopicSpec.Name> per logical topic and, per business
//     group, <prefix><group>.RETRY and <prefix><group>.DLQ. Broker.Start and
//     Plug.NewNamespace create them idempotently with kadm.
//   - Publisher produces with acks=all and the idempotent producer, bounded
//     by min(ctx, Neutral.SendTimeout): produced = nil, a message that was
//     certainly not written = ports.ErrSendRejected, anything else =
//     ports.ErrSendUnknown. Kafka has no native delay, so a message with
//     DeliverAt is refused (Features.DelayedDelivery is false) and the
//     outbox relay holds it until it is due.
//   - Consumer: one group consumer per business group (group id
//     <prefix><group>) on the group's topic and its retry topic, manual
//     commits of the contiguous watermark of finished records per
//     partition. A record not acknowledged by an unordered group is copied
//     to the retry topic (attempt+1, due time) or, past the redelivery
//     bound, to the dead-letter topic; an ordered group retries in place,
//     holding its partition, so no later message overtakes it.
//   - DeadLetterReader consumes every <prefix>*.DLQ topic in the group
//     <prefix>SECKILL_DLQ_READER and tells each delivery's origin from its
//     headers.
//
// README.md lists the decisions and how the tests run against a broker.
package kafka
