// Package benchconsume is `seckill-bench consume`: order creation by the
// order-create consumer. It publishes order-create messages for one hot
// SKU through the real broker, lets the consumer drain them into a fresh
// PostgreSQL database per mode and reports orders created per second for
// each batch size, beside the handler-alone ceiling (the same
// transactions without the broker), with the books checked after each
// mode. With --sweep it compares fixed consumer concurrencies with the
// adaptive limiter; --pg-cpu caps the stack's PostgreSQL with a CPU
// cgroup for the run, --pg-standby runs on a private primary with a
// standby.
//
// Run is the command; nothing else is exported.
package benchconsume
