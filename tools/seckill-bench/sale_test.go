package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/tools/internal/benchsale"
	"github.com/seckill-dev/seckill/tools/internal/saleload"
)

// TestBenchSaleEndToEnd runs a small `seckill-bench sale` on the stack:
// it must exit 0, write a result.json that parses, report every checked
// invariant held and write the report.
func TestBenchSaleEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	bin := buildBinaries(t, ctx, tmp)
	out := filepath.Join(tmp, "out")
	cmd := exec.CommandContext(ctx, bin, "sale", "--stock", "200", "--buyers", "600", "--clients", "16",
		"--ceiling-calls", "3000", "--settle", "90s", "--out", out)
	cmd.Env = os.Environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("seckill-bench sale: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), tail(stderr.String(), 4000))
	}
	b, err := os.ReadFile(filepath.Join(out, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r benchsale.Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("result.json does not parse: %v", err)
	}
	if r.Violations != 0 {
		t.Errorf("%d invariant violations:\n%s", r.Violations, stdout.String())
	}
	checked := map[string]bool{}
	for _, c := range r.Invariants {
		checked[c.ID] = c.Checked
		if c.Violations != 0 {
			t.Errorf("%s (%s): %d violations: %s", c.ID, c.Name, c.Violations, c.Detail)
		}
	}
	for _, id := range []string{"I1", "I2", "I3", "I6", "I7"} {
		if !checked[id] {
			t.Errorf("%s was not checked", id)
		}
	}
	s := r.Summary
	if !s.Drained || s.AcceptedOrders == 0 || int64(s.AcceptedOrders) > int64(r.Settings.Stock) {
		t.Errorf("drained %v, %d accepted orders for %d units", s.Drained, s.AcceptedOrders, r.Settings.Stock)
	}
	if calls := s.Answers[saleload.Accepted] + s.Answers[saleload.SoldOut] + s.Answers[saleload.AlreadyPurchased] + s.Answers[saleload.Other]; calls != 1200 {
		t.Errorf("%d answers, want 600 buyers x 2 attempts", calls)
	}
	if !s.OutboxDrained || s.RelayDrainSeconds < 0 || s.LastPublishedAt.IsZero() || s.OutboxUnpublishedAtEnd != 0 {
		t.Errorf("outbox drained %v, relay drain %.2f s, last published %v, %d rows left: the relay did not finish",
			s.OutboxDrained, s.RelayDrainSeconds, s.LastPublishedAt, s.OutboxUnpublishedAtEnd)
	}
	if s.OutboxUnpublishedAtLoadEnd < 0 || (s.OutboxUnpublishedAtLoadEnd > 0 && s.RelayDrainSeconds <= 0) {
		t.Errorf("%d outbox rows unpublished at the end of the load, relay drain %.2f s", s.OutboxUnpublishedAtLoadEnd, s.RelayDrainSeconds)
	}
	for _, row := range []string{"outbox rows unpublished at the end of the load", "outbox drained (relay published every row)",
		"relay drain: outbox empty - end of load"} {
		if !strings.Contains(stdout.String(), row) {
			t.Errorf("the summary has no row %q", row)
		}
	}
	if len(r.Series) == 0 {
		t.Error("no time series")
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
	t.Logf("\n%s", stdout.String())
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
