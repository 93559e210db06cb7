package bootstrap_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// newTestLogger returns the service logger of a test: JSON lines at every
// level from DEBUG up, each checked strictly (checkLogLine: one JSON
// object, no key twice in any object), a failing line failing the test
// with t.Errorf; the lines at level or above go to t.Log (shown on
// failure), the DEBUG lines below it are formatted and checked but not
// printed. Lines written after the test ended are ignored.
func newTestLogger(t *testing.T, level slog.Level) *slog.Logger {
	l, _ := newLogCheck(t, level, false)
	return l
}

// newCapturingLogger is newTestLogger that also keeps every line (DEBUG
// included) for assertions: lines returns a copy of the lines so far, each
// decoded into a map.
func newCapturingLogger(t *testing.T, level slog.Level) (logger *slog.Logger, lines func() []map[string]any) {
	l, c := newLogCheck(t, level, true)
	return l, c.captured
}

func newLogCheck(t *testing.T, level slog.Level, capture bool) (*slog.Logger, *logCheck) {
	c := &logCheck{level: level, capture: capture, errorf: t.Errorf, logf: t.Log}
	t.Cleanup(c.end)
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})), c
}

// logCheck is the io.Writer behind newTestLogger.
type logCheck struct {
	level   slog.Level
	capture bool
	errorf  func(format string, args ...any)
	logf    func(args ...any)

	mu      sync.Mutex
	ended   bool
	partial []byte // a line not yet ended by a newline
	lines   []map[string]any
}

var _ io.Writer = (*logCheck)(nil)

// Write checks and forwards every complete line of p.
func (c *logCheck) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return len(p), nil
	}
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		c.line(c.partial[:i])
		c.partial = c.partial[i+1:]
	}
	return len(p), nil
}

// line checks one line and forwards it to the test log when its level is
// at least c.level (a line that cannot be read is always forwarded).
func (c *logCheck) line(b []byte) {
	text := string(b)
	if err := checkLogLine(b); err != nil {
		c.errorf("log line rejected: %v: %s", err, text)
		return
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		c.errorf("log line rejected: %v: %s", err, text)
		return
	}
	var lvl slog.Level
	s, _ := m["level"].(string)
	if err := lvl.UnmarshalText([]byte(s)); err != nil {
		c.errorf("log line with level %q: %v: %s", m["level"], err, text)
		return
	}
	if c.capture {
		c.lines = append(c.lines, m)
	}
	if lvl >= c.level {
		c.logf(text)
	}
}

// end stops the checks: the test is over (t.Errorf and t.Log would panic).
func (c *logCheck) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
}

func (c *logCheck) captured() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string]any(nil), c.lines...)
}

// checkLogLine reports why b is not a strict JSON log line: it must hold
// exactly one JSON object, and no object in it (nested ones and those in
// arrays included) may have a key twice. encoding/json keeps the last of
// two equal keys silently, and so do most log pipelines: a repeated key is
// a field lost.
func checkLogLine(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	if err := checkObject(dec, "$"); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("text after the object (%v)", err)
	}
	return nil
}

// checkObject reads the rest of an object whose '{' was read.
func checkObject(dec *json.Decoder, path string) error {
	keys := map[string]bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if tok == json.Delim('}') {
			return nil
		}
		k, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%s: key %v is not a string", path, tok)
		}
		if keys[k] {
			return fmt.Errorf("duplicate key %q in %s", k, path)
		}
		keys[k] = true
		if err := checkValue(dec, path+"."+k); err != nil {
			return err
		}
	}
}

// checkValue reads one value, checking the objects inside it.
func checkValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	switch tok {
	case json.Delim('{'):
		return checkObject(dec, path)
	case json.Delim('['):
		for i := 0; ; i++ {
			if !dec.More() {
				_, err := dec.Token() // ']'
				return err
			}
			if err := checkValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestCheckLogLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line string
		want string // "" for a valid line, else a part of the error
	}{
		{`{"time":"t","level":"INFO","msg":"m","a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}`, ""},
		{`{"level":"INFO","msg":"m","consumer_group":"g","consumer_group":"g"}`, `duplicate key "consumer_group" in $`},
		{`{"level":"INFO","msg":"m","req":{"id":1,"id":2}}`, `duplicate key "id" in $.req`},
		{`{"level":"INFO","msg":"m","a":{"b":{"c":1,"d":{},"c":2}}}`, `duplicate key "c" in $.a.b`},
		{`{"level":"INFO","msg":"m","list":[1,{"x":1,"x":1}]}`, `duplicate key "x" in $.list[1]`},
		{`{"level":"INFO","msg":"m"} {"level":"INFO"}`, "text after the object"},
		{`{"level":"INFO","msg":`, "$"},
		{`level=INFO msg=m`, "not JSON"},
		{`["level","INFO"]`, "not a JSON object"},
	} {
		err := checkLogLine([]byte(c.line))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: rejected: %v", c.line, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: accepted, want an error with %q", c.line, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: error %q, want one with %q", c.line, err, c.want)
		}
	}
}

// TestLogCheckFailsOnRepeatedAttributes drives the checker through slog
// itself: an attribute added by With and again by the call, and one
// repeated inside a group, each fail the test with the line; DEBUG lines
// are checked but only lines at the level are printed; nothing is checked
// after the end.
func TestLogCheckFailsOnRepeatedAttributes(t *testing.T) {
	t.Parallel()
	var errs, printed []string
	c := &logCheck{level: slog.LevelInfo, capture: true,
		errorf: func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) },
		logf:   func(a ...any) { printed = append(printed, fmt.Sprint(a...)) }}
	log := slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))

	log.Info("fine", "order_id", "ord_1")
	log.Debug("quiet", "order_id", "ord_2")
	if len(errs) != 0 || len(printed) != 1 || !strings.Contains(printed[0], `"msg":"fine"`) {
		t.Fatalf("valid lines: errors %q, printed %q", errs, printed)
	}
	if got := c.captured(); len(got) != 2 || got[1]["msg"] != "quiet" {
		t.Fatalf("captured %v, want both lines", got)
	}

	log.With("consumer_group", "g").Info("mq consume", "consumer_group", "g")
	log.Debug("grouped", slog.Group("req", "id", 1, "id", 2))
	if len(errs) != 2 || !strings.Contains(errs[0], `duplicate key "consumer_group"`) ||
		!strings.Contains(errs[1], `duplicate key "id" in $.req`) || !strings.Contains(errs[1], `"msg":"grouped"`) {
		t.Fatalf("errors %q, want the two repeated keys with their lines", errs)
	}

	_, _ = c.Write([]byte("not json\n"))
	if len(errs) != 3 {
		t.Fatalf("an unreadable line was not reported: %q", errs)
	}
	c.end()
	log.Info("late", "k", 1, "k", 2)
	if len(errs) != 3 || len(printed) != 1 {
		t.Fatalf("a line after the end was checked or printed: errors %q, printed %q", errs, printed)
	}
}

// TestTestLoggerOutlivesItsTest: newTestLogger on a real test: valid lines
// at every level pass, and a line written after the test ended (a service
// still stopping) is ignored instead of panicking in t.Log or t.Errorf.
func TestTestLoggerOutlivesItsTest(t *testing.T) {
	t.Parallel()
	var log *slog.Logger
	t.Run("service", func(t *testing.T) {
		log = newTestLogger(t, slog.LevelInfo)
		log.Debug("checked, not printed", "order_id", "ord_1")
		log.Info("printed", "order_id", "ord_1", slog.Group("req", "id", 1))
	})
	log.Warn("after the end", "k", 1, "k", 2)
}
