package devstack

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fake is a Component without a process: it records its starts and stops.
type fake struct {
	name    string
	deps    []string
	running bool
	failing bool
	events  *events
}

type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, s)
}

func (e *events) index(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Index(e.list, s)
}

func (f *fake) Name() string                      { return f.name }
func (f *fake) Group() string                     { return f.name }
func (f *fake) DependsOn() []string               { return f.deps }
func (f *fake) PIDFile() string                   { return "/nonexistent/" + f.name + ".pid" }
func (f *fake) DataDir() string                   { return "/nonexistent/" + f.name }
func (f *fake) Grace() time.Duration              { return 0 }
func (f *fake) Purge() error                      { return nil }
func (f *fake) Status(context.Context) StatusInfo { return StatusInfo{} }
func (f *fake) PID() int {
	if f.running {
		return 4242
	}
	return 0
}
func (f *fake) Adopt(context.Context) (int, error) { return f.PID(), nil }
func (f *fake) Healthy(context.Context) error {
	if !f.running {
		return errors.New(f.name + ": down")
	}
	return nil
}
func (f *fake) Start(context.Context) error {
	f.events.add("start " + f.name)
	if f.failing {
		return errors.New(f.name + ": start failed")
	}
	f.running = true
	return nil
}
func (f *fake) Stop(context.Context) error {
	f.events.add("stop " + f.name)
	f.running = false
	return nil
}

func TestUpAndDownFollowDependencies(t *testing.T) {
	ev := &events{}
	ns := &fake{name: "namesrv", events: ev}
	proxy := &fake{name: "proxy", deps: []string{"namesrv"}, events: ev}
	redis := &fake{name: "redis", events: ev, running: true}
	cfg := Config{StateDir: t.TempDir()}
	s, err := New(cfg, testLogger(t), []Component{proxy, redis, ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	if err := s.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if ev.index("start namesrv") < 0 || ev.index("start namesrv") > ev.index("start proxy") {
		t.Fatalf("start order %v: namesrv must start before proxy", ev.list)
	}
	if ev.index("start redis") >= 0 {
		t.Fatalf("a healthy redis was started again: %v", ev.list)
	}
	if err := s.Down(ctx, false, []string{"namesrv"}); err != nil {
		t.Fatal(err)
	}
	// namesrv stands for its group only; the proxy depends on it but is not selected.
	if ev.index("stop proxy") >= 0 || ev.index("stop namesrv") < 0 {
		t.Fatalf("down namesrv: %v", ev.list)
	}
	if err := s.Down(ctx, false, nil); err != nil {
		t.Fatal(err)
	}
	// The second down stops the proxy, then the name server again (already stopped: a no-op for a real one).
	lastNamesrvStop := -1
	for i, e := range ev.list {
		if e == "stop namesrv" {
			lastNamesrvStop = i
		}
	}
	if ev.index("stop proxy") < 0 || ev.index("stop proxy") > lastNamesrvStop {
		t.Fatalf("stop order %v: proxy must stop before namesrv", ev.list)
	}
}

func TestUpSkipsDependentsOfAFailedComponent(t *testing.T) {
	ev := &events{}
	ns := &fake{name: "namesrv", events: ev, failing: true}
	proxy := &fake{name: "proxy", deps: []string{"namesrv"}, events: ev}
	s, err := New(Config{StateDir: t.TempDir()}, testLogger(t), []Component{ns, proxy}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Up(testContext(t))
	if err == nil || !strings.Contains(err.Error(), "namesrv: start failed") || !strings.Contains(err.Error(), "proxy: not started: namesrv failed") {
		t.Fatalf("Up = %v", err)
	}
	if ev.index("start proxy") >= 0 {
		t.Fatalf("proxy started after its dependency failed: %v", ev.list)
	}
	if _, err := New(Config{}, nil, []Component{proxy}, nil); err == nil {
		t.Fatal("New accepted a dependency that is not in the stack")
	}
	if _, err := s.Select([]string{"bogus"}); err == nil {
		t.Fatal("Select accepted an unknown name")
	}
}
