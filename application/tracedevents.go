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

// appendTraced appends the events of runs, in order, within tx, each
// recording the trace of its run: the store takes an event's trace from
// its order's entry in ports.WithEventTraces, so the runs share one
// AppendEvents call under ctx carrying a map from order id to run trace (a
// run without a trace maps its orders to the zero one and records none,
// whatever ctx held). Only an order that appears in two runs with
// different traceparents, which the batched writers never produce, starts
// a further call at the run where its trace changes, so every event still
// records its own run's trace.
func appendTraced(ctx context.Context, tx ports.Tx, runs []tracedEvents) error {
	var (
		events []order.Event
		traces = make(map[string]message.TraceContext, len(runs))
	)
	flush := func() error {
		if len(events) == 0 {
			return nil
		}
		err := tx.AppendEvents(ports.WithEventTraces(ctx, traces), events)
		events, traces = nil, make(map[string]message.TraceContext, len(runs))
		return err
	}
	for _, r := range runs {
		for _, e := range r.events {
			if tc, ok := traces[e.OrderID]; ok && tc.Traceparent != r.trace.Traceparent {
				if err := flush(); err != nil {
					return err
				}
			}
			traces[e.OrderID] = r.trace
			events = append(events, e)
		}
	}
	return flush()
}
