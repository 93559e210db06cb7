// Package rocketmq is the RocketMQ 5 adapter: it implements ports.Publisher
// and drives ports.BatchHandler consumers with the Go client
// github.com/apache/rocketmq-clients/golang/v5 (v5.1.2) through the proxy's
// gRPC endpoint, and it administers topics and consumer groups through the
// broker's remoting protocol.
//
//   - Config maps logical topics (ports.Topic) and consumer groups (Group) to
//     physical names with the environment prefix.
//   - Publisher sends one message per Publish with a bounded synchronous
//     send (deadline = min(ctx, Config.SendTimeout), one attempt) and
//     classifies the result: CONFIRMED, UNKNOWN (ports.ErrSendUnknown) or
//     DEFINITE_FAILURE (ports.ErrSendRejected).
//   - Runner drives one SimpleConsumer: long-polling receives, at most
//     Concurrency concurrent handler calls, invisible-duration renewal,
//     acknowledgement only of acknowledging decisions, graceful stop.
//   - ParseDeadLetter reads a message received from %DLQ%<group>.
//   - Admin creates, reads and deletes topics and consumer groups
//     (UPDATE_AND_CREATE_TOPIC, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ...).
//   - Topology (NewTopology) is the one definition of the broker's topics and
//     consumer groups with their production settings; Apply makes a broker
//     match it and Check lists every difference.
//
// The client library keeps process-wide state (its log, its gRPC connection
// factory); InstallRuntime, called by the first NewPublisher or NewRunner,
// configures it: the client's log goes to Config.ClientLogDir, a data race
// of the library on the telemetry settings is neutralised, and tests can
// redirect the library's gRPC dials through a fault proxy (RedirectDials).
// README.md lists the client and broker behaviours this adapter relies on,
// as verified against the local stack.
package rocketmq
