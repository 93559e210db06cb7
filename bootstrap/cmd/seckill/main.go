// Command seckill is the flash-sale order service: one binary whose
// subcommands serve the API with every worker, migrate the database, mint
// local tokens, reconcile, rebuild the query view, operate the dead-letter
// queue and run the benchmarks. Configuration comes from SECKILL_*
// environment variables (see bootstrap/config).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand.
type command struct {
	name, usage string
	run         func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "serve [--seed-demo]: the Connect API and every worker", serve},
		{"migrate", "migrate up|status: apply or list the database migrations", migrate},
		{"token", "token --user N [--admin] [--ttl 24h]: mint a bearer token for local use", token},
		{"reconcile", "reconcile [--token T]: one reconciliation pass (audited); prints the report", reconcile},
		{"projection", "projection rebuild [--token T]: rebuild the Redis query view from order_events (audited)", projection},
		{"dlq", "dlq list [--group G] [--token T] | dlq replay --id N --reason TEXT [--token T]: operate dead letters through the API", dlq},
		{"bench", "bench place|consume|timeouts|sale: the benchmarks of docs/benchmarks.md", bench},
		{"chaos", "chaos [--scenarios kill-proxy,...] [--stock N --buyers N]: a sale on two instances under faults; kills and restarts stack processes", chaos},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usage(stdout)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout)
		}
	}
	_ = usage(os.Stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) error {
	fmt.Fprintln(w, "usage: seckill <command> [flags]")
	for _, c := range commands() {
		fmt.Fprintln(w, "  "+c.usage)
	}
	fmt.Fprintln(w, "Commands that change state (reconcile, projection rebuild, dlq replay) run as the operator of")
	fmt.Fprintln(w, "an admin token, --token or $"+envOperatorToken+", and are audited under that user.")
	return flag.ErrHelp
}
