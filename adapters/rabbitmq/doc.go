// Package rabbitmq is the RabbitMQ adapter: it implements ports.Publisher
// and drives ports.BatchHandler consumers with the official Go client
// github.com/rabbitmq/amqp091-go (v1.16, automatic connection recovery on),
// behind the same ports as the RocketMQ adapter, on RabbitMQ 3.10 or later
// (quorum queues with message TTL and at-least-once dead-lettering).
//
//   - Topology (NewTopology) is the one definition of what a virtual host
//     holds, built from the broker-neutral ports.TopicSpecs and
//     ports.Subscriptions: a fanout exchange per NORMAL or DELAY topic and a
//     direct exchange (one routing key per shard) for the FIFO topic, each
//     with an alternate exchange for unroutable messages; per group,
//     durable quorum queues with a delivery limit of the group's MaxRetries
//     and dead-lettering into the group's dead-letter queue (an ordered
//     group: FIFO shards with single-active-consumer); one TTL queue per
//     delay tier dead-lettering into a redeliver exchange. Declare creates
//     it idempotently.
//   - Publisher sends with publisher confirms, bounded by min(ctx,
//     Config.SendTimeout), and classifies the result: CONFIRMED, UNKNOWN
//     (ports.ErrSendUnknown) or DEFINITE_FAILURE (ports.ErrSendRejected).
//   - Runner consumes a group's queues with manual acknowledgement after
//     the handler's decision, prefetch bounded by its concurrency (1 per
//     FIFO shard), retries with backoff through the delay tiers, and
//     dead-lettering after the bounded retries; NewDeadLetterRunner reads
//     every group's dead-letter queue for the dead-letter table.
//
// README.md lists the broker and client behaviours this adapter relies on,
// as verified against Debian's rabbitmq-server 3.10.8, and how to run a
// private broker for development and tests.
package rabbitmq
