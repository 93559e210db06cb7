package application

import (
	"context"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// tracedEvents are the events one operation (a request or a message)
// caused, with that operation's trace context.
type tracedEvents struct {
	trace  message.TraceContext
	events []order.Event
}

// appendTraced appends the events of runs, in order, within tx. The store
// records with every event the trace found in the context of its append
// (ports.TraceFrom), so each AppendEvents call is made under ctx carrying
// its run's trace (ports.WithTrace; a run without one appends without any,
// whatever ctx held); consecutive runs with the same traceparent share one
// call. A batch of operations with distinct traces therefore costs one
// call per operation.
func appendTraced(ctx context.Context, tx ports.Tx, runs []tracedEvents) error {
	for i := 0; i < len(runs); {
		tc := runs[i].trace
		var events []order.Event
		for ; i < len(runs) && runs[i].trace.Traceparent == tc.Traceparent; i++ {
			events = append(events, runs[i].events...)
		}
		if len(events) == 0 {
			continue
		}
		if err := tx.AppendEvents(ports.WithTrace(ctx, tc), events); err != nil {
			return err
		}
	}
	return nil
}
