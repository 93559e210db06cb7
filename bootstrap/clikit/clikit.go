// Package clikit holds what the project's command-line programs (seckill
// and seckill-bench) share on top of cobra: the usage error that makes the
// process exit with status 2, the argument checks that produce it, and
// the mapping of a command's outcome to the exit status.
package clikit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// UsageError is a command line the commands do not accept: an unknown
// command or flag, a missing subcommand or argument, a bad flag value. The
// process exits with status 2. It deliberately does not wrap
// flag.ErrHelp: cobra answers an error that does with the help text and
// success.
type UsageError struct{ msg string }

// Error implements error.
func (e *UsageError) Error() string { return e.msg }

// NewUsageError returns a UsageError with msg as it is.
func NewUsageError(msg string) *UsageError { return &UsageError{msg: msg} }

// Usagef returns a UsageError that names the command's help.
func Usagef(cmd *cobra.Command, format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())}
}

// FlagError turns cobra's flag errors into usage errors (for
// cobra.Command.SetFlagErrorFunc).
func FlagError(cmd *cobra.Command, err error) error {
	return Usagef(cmd, "%s: %v", cmd.CommandPath(), err)
}

// UnknownCommand is the argument check of a command that takes no
// arguments but has subcommands: an argument is an unknown command.
func UnknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return Usagef(cmd, "unknown command %q for %q%s", args[0], cmd.CommandPath(), Suggest(cmd, args[0]))
}

// Suggest returns ` (did you mean "x"?)` for a mistyped command, or "".
func Suggest(cmd *cobra.Command, typed string) string {
	s := cmd.SuggestionsFor(typed)
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", s[0])
}

// AddGroup adds cmds to root under the help's group id.
func AddGroup(root *cobra.Command, id string, cmds ...*cobra.Command) {
	for _, cmd := range cmds {
		cmd.GroupID = id
		root.AddCommand(cmd)
	}
}

// ExitCode is the process status for the outcome err of a command line: 0
// for success (help included), 2 for a command line the commands do not
// accept, 1 for a command that failed.
func ExitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		return 2
	default:
		return 1
	}
}

// Main runs a program's command line: execute gets os.Args[1:] and a
// context canceled by SIGINT or SIGTERM; an error is printed to stderr
// after "prog: " and the process exits with ExitCode of it.
func Main(prog string, execute func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := execute(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, prog+":", err)
	}
	os.Exit(ExitCode(err))
}
