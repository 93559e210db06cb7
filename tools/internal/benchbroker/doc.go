// Package benchbroker is `seckill-bench broker`: the broker alone. For
// each kind of message an accepted order makes the broker carry (the
// order-create request, the ORDER_CREATED event, the FIFO state change)
// it publishes messages from concurrent senders into a broker namespace
// of its own, consumes them with the service's consumer and a handler
// that only acknowledges, and reports the broker's CPU per message with
// its idle share subtracted: the broker's floor per order.
//
// Run is the command; nothing else is exported.
package benchbroker
