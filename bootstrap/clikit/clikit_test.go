package clikit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/seckill-dev/seckill/bootstrap/clikit"
)

func TestExitCodes(t *testing.T) {
	root := &cobra.Command{Use: "prog", Args: clikit.UnknownCommand, RunE: func(*cobra.Command, []string) error { return nil }}
	clikit.AddGroup(root, "g", &cobra.Command{Use: "serve", Run: func(*cobra.Command, []string) {}})
	root.AddGroup(&cobra.Group{ID: "g", Title: "G:"})
	err := clikit.UnknownCommand(root, []string{"serv"})
	if clikit.ExitCode(err) != 2 || !strings.Contains(err.Error(), `did you mean "serve"`) || !strings.Contains(err.Error(), "prog --help") {
		t.Fatalf("unknown command: %v (exit %d)", err, clikit.ExitCode(err))
	}
	if got := clikit.ExitCode(fmt.Errorf("wrapped: %w", clikit.NewUsageError("bad"))); got != 2 {
		t.Fatalf("wrapped usage error exits %d, want 2", got)
	}
	if clikit.ExitCode(nil) != 0 || clikit.ExitCode(errors.New("failed")) != 1 {
		t.Fatal("exit codes of success and failure")
	}
}
