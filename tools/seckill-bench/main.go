// Command seckill-bench runs the benchmarks of docs/benchmarks.md and the
// fault-injection sale of docs/operations.md against the local stack:
// `seckill-bench place|consume|timeouts|sale` and `seckill-bench chaos`.
// It is a binary of its own so that the service binary (bootstrap/cmd/
// seckill) carries no load generator. sale and chaos start the service as
// `seckill serve` subprocesses: the seckill binary beside this one (make
// build-bench builds both into bin/). Every command answers -h and --help
// with its flags and does nothing else; docs/cli.md describes the tree.
//
// This package is the command line only: each command is a package of its
// own under tools/internal (benchplace, benchconsume, benchbroker,
// benchanswers, benchevents, benchtimeouts, benchsale, hotsku, chaos,
// clustersale) exporting the entry cli.go wires.
package main

import (
	"os"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

func main() {
	clikit.Main("seckill-bench", newCLI(os.Stdout, os.Stderr).execute)
}
