package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// runJSON runs the command line and decodes what it printed.
func runJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), args, &out); err != nil {
		t.Fatalf("seckill %s: %v", strings.Join(args, " "), err)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("seckill %s printed %q: %v", strings.Join(args, " "), out.String(), err)
	}
	return m
}

// TestActivityCommands: against a running service, an operator creates an
// activity from flags and another from CreateActivityRequest JSON
// (durations as protobuf Duration strings), lists them (and by state),
// shows one with its books, pauses, resumes, moves its end and closes it;
// each state-changing command is audited once under the operator.
func TestActivityCommands(t *testing.T) {
	useStack(t)
	tok := mint(t, secret, 42, true)
	t.Setenv("SECKILL_OPERATOR_TOKEN", tok)
	addr := serveAPI(t)
	a := []string{"--addr", addr}
	created := runJSON(t, append([]string{"activity", "create", "--activity", "501", "--stock", "20",
		"--starts-at", "now", "--ends-at", "now+1h", "--price", "250", "--currency", "EUR"}, a...)...)
	if act := created["activity"].(map[string]any); act["stock"] != "20" || act["unitPrice"] != "250" {
		t.Fatalf("create printed %v", created)
	}
	var in bytes.Buffer
	start := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	end := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	in.WriteString(`{"activityId":"502","skuId":"1","stock":"5","startsAt":"` + start + `","endsAt":"` + end +
		`","paymentTimeout":"900s","reservationTtl":"600s"}`)
	cli := newCLI(&bytes.Buffer{}, &bytes.Buffer{})
	root := cli.rootCmd()
	root.SetIn(&in)
	root.SetArgs(append([]string{"activity", "create", "--json", "-"}, a...))
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("create --json -: %v", err)
	}

	list := runJSON(t, append([]string{"activity", "list"}, a...)...)
	if acts, _ := list["activities"].([]any); len(acts) != 2 {
		t.Fatalf("list printed %v, want two activities", list)
	}
	scheduled := runJSON(t, append([]string{"activity", "list", "--state", "SCHEDULED"}, a...)...)
	if acts, _ := scheduled["activities"].([]any); len(acts) != 1 ||
		acts[0].(map[string]any)["activity"].(map[string]any)["activityId"] != "502" {
		t.Fatalf("list --state SCHEDULED printed %v, want activity 502 only", scheduled)
	}
	show := runJSON(t, append([]string{"activity", "show", "--activity", "501"}, a...)...)
	if show["books"].(map[string]any)["initialStock"] != "20" {
		t.Fatalf("show printed %v", show)
	}
	if p := runJSON(t, append([]string{"activity", "pause", "--activity", "501"}, a...)...); p["activity"].(map[string]any)["state"] != "ACTIVITY_STATE_PAUSED" {
		t.Fatalf("pause printed %v", p)
	}
	if r := runJSON(t, append([]string{"activity", "resume", "--activity", "501"}, a...)...); r["activity"].(map[string]any)["state"] != "ACTIVITY_STATE_ON_SALE" {
		t.Fatalf("resume printed %v", r)
	}
	runJSON(t, append([]string{"activity", "update", "--activity", "501", "--ends-at", "now+30m"}, a...)...)
	closed := runJSON(t, append([]string{"activity", "close", "--activity", "501"}, a...)...)
	if closed["activity"].(map[string]any)["state"] != "ACTIVITY_STATE_ENDED" || closed["unsold"] != "20" {
		t.Fatalf("close printed %v, want ENDED with 20 unsold", closed)
	}
	var out bytes.Buffer
	if err := run(t.Context(), append([]string{"activity", "close", "--activity", "501"}, a...), &out); err == nil ||
		!strings.Contains(err.Error(), "close activity 501/1") {
		t.Fatalf("a second close: %v, want the service's refusal", err)
	}
	if err := run(t.Context(), append([]string{"activity", "list", "--state", "OPEN"}, a...), &out); err == nil ||
		!strings.Contains(err.Error(), "--state") {
		t.Fatalf("list --state OPEN: %v, want a usage error naming --state", err)
	}

	counts := map[string]int{}
	for _, r := range auditLog(t) {
		if r.Actor != ports.UserActor(42) {
			t.Fatalf("audit row %+v not under the operator", r)
		}
		counts[r.Action+"/"+r.Outcome]++
	}
	want := map[string]int{"CREATE_ACTIVITY/CREATED": 2, "PAUSE_ACTIVITY/OK": 1, "RESUME_ACTIVITY/OK": 1,
		"UPDATE_ACTIVITY/OK": 1, "CLOSE_ACTIVITY/OK": 1, "CLOSE_ACTIVITY/REFUSED": 1}
	if !maps.Equal(counts, want) {
		t.Fatalf("audit rows %v, want %v", counts, want)
	}
}
