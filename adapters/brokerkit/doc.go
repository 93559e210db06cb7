// Package brokerkit holds what every broker adapter (adapters/rocketmq,
// adapters/rabbitmq, adapters/kafka) shares that is not a port: rules of
// sending and consuming that must behave the same whatever the broker, the
// metric names they export, and what the core supplies when a broker lacks
// a feature (CountDeliveries). It imports no broker driver. Among the
// adapters only the broker adapters may import it (bootstrap/deps_test.go);
// the composition root (bootstrap) wires its RegistryStatus and
// CountDeliveries.
package brokerkit
