package main

import (
	"github.com/spf13/cobra"
)

// benchCmd holds the benchmarks of docs/benchmarks.md. Each parses its
// own flags (see flagSetCmd) and works on a scratch stack: fresh topics,
// consumer groups, Redis namespace, database and activity ids, removed
// afterwards, so a running `make run` service is not disturbed.
func (c *cli) benchCmd() *cobra.Command {
	return groupCmd("bench", "Run the benchmarks of docs/benchmarks.md on the local stack",
		`Run the benchmarks of docs/benchmarks.md against the local stack. Each run works in its own
namespace (fresh topics and consumer groups, Redis namespace, database and activity ids), all
removed afterwards, so a running service is not disturbed. Progress goes to stderr.`,
		c.flagSetCmd("place", "Measure PlaceOrder through the API beside its ceilings",
			`Measure PlaceOrder through the Connect API at several client counts, beside three
ceilings measured in the same run: the reserve script alone, a bare synchronous send loop
and a naive PostgreSQL row-lock purchase.`, benchPlace),
		c.flagSetCmd("consume", "Measure order creation by the order-create consumer",
			`Publish order-create messages for one hot SKU through the real broker, let the
order-create consumer drain them into PostgreSQL and report orders created per second for
each batch size, beside the handler-alone ceiling, with the invariants checked.`, benchConsume),
		c.flagSetCmd("timeouts", "Measure the payment-timeout wave",
			`Sell units through the real service with a short payment timeout, let every order expire
unpaid and report how late the orders were canceled and the stock released, beside the
PostgreSQL ceiling of the cancel transactions.`, benchTimeouts),
		c.flagSetCmd("sale", "Run a whole sale against one seckill serve and write a report",
			`Run a whole sale against one seckill serve subprocess on a scratch stack: buyers arrive
and place orders through the public API while a sampler records rates, orders, backlog,
latency and CPU; then check the invariants, measure the ceilings and write result.json and
report.html.`, benchSale),
	)
}

// chaosCmd runs the fault-injection sale.
func (c *cli) chaosCmd() *cobra.Command {
	return c.flagSetCmd("chaos", "Sell through two instances while faults are injected; kills and restarts stack processes",
		`Sell through two service instances sharing the local stack while one fault per scenario is
injected (processes killed or paused, connections delayed, black-holed or reset, consumers
crashing), then check every buyer's answers against PostgreSQL and print one row per
scenario. It fails when an invariant is violated. It kills and restarts processes of the
local stack: never run it beside make test.`, chaos)
}
