// Package chromium gives tests a headless-capable Chromium: the one on
// PATH, or the one deploy/local/chromium.sh installs (Debian's package).
// A test that needs it fails, never skips, when it cannot be had.
package chromium

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Path returns the chromium executable, installing it with the
// repository's deploy/local/chromium.sh when it is missing.
func Path(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	root, err := repoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	script := filepath.Join(root, "deploy", "local", "chromium.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, script).CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", script, err, out)
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		tb.Fatalf("%s ran but chromium is not on PATH: %v", script, err)
	}
	return p
}

// repoRoot is the nearest directory above the working directory (a test's
// package directory) that holds go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("chromium: no go.mod above the working directory")
		}
		dir = parent
	}
}
