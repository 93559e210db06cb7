// Command seckill is the flash-sale order service: one binary whose
// commands serve the API with every worker, migrate the database, mint
// local tokens, reconcile, rebuild the query view and operate the
// dead-letter queue (the benchmarks and the fault-injection sale are
// tools/seckill-bench). Every command and subcommand answers -h
// and --help with its flags and does nothing else; `seckill config` lists
// the SECKILL_* environment variables the service reads (see
// bootstrap/config) and docs/cli.md describes the command tree.
package main

import (
	"context"
	"io"
	"os"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

func main() {
	clikit.Main("seckill", newCLI(os.Stdout, os.Stderr).execute)
}

// run runs the command line args (without the program name), writing the
// commands' output to stdout and diagnostics to os.Stderr.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	return newCLI(stdout, os.Stderr).execute(ctx, args)
}
