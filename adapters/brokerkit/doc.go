// Package brokerkit holds what every broker adapter (adapters/rocketmq,
// adapters/rabbitmq) shares that is not a port: rules of sending that must
// behave the same whatever the broker. It imports no broker driver, and
// the broker adapters are the only packages allowed to import it besides
// their tests (bootstrap/deps_test.go).
package brokerkit
