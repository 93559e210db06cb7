// Command seckill-bench runs the benchmarks of docs/benchmarks.md and the
// fault-injection sale of docs/operations.md against the local stack:
// `seckill-bench place|consume|timeouts|sale` and `seckill-bench chaos`.
// It is a binary of its own so that the service binary (bootstrap/cmd/
// seckill) carries no load generator. sale and chaos start the service as
// `seckill serve` subprocesses: the seckill binary beside this one (make
// build-bench builds both into bin/). Every command answers -h and --help
// with its flags and does nothing else; docs/cli.md describes the tree.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newCLI(os.Stdout, os.Stderr).execute(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "seckill-bench:", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is the process status for the outcome err of a command line: 0
// for success (help included), 2 for a command line the commands do not
// accept, 1 for a command that failed.
func exitCode(err error) int {
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		return 2
	default:
		return 1
	}
}
