package prometheus_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rulesFile is the rules file Prometheus loads; testFiles are its promtool
// unit tests.
const (
	rulesFile = "rules.yml"
	testFiles = "tests/*.yml"
)

// TestPromtool checks the rules file with `promtool check rules` and runs the
// unit tests with `promtool test rules`. promtool comes from
// deploy/local/promtool.sh; the test fails (never skips) when it cannot get
// one.
func TestPromtool(t *testing.T) {
	promtool := ensurePromtool(t)
	tests := testPaths(t)

	out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	// The line-based reader of the coverage test must see every rule that
	// promtool sees.
	m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("promtool check rules printed no rule count:\n%s", out)
	}
	found, _ := strconv.Atoi(string(m[1]))
	if got := len(readRules(t)); got != found {
		t.Fatalf("the coverage test reads %d rules in %s, promtool found %d: keep one `- alert:` or `- record:` per rule", got, rulesFile, found)
	}

	args := append([]string{"test", "rules"}, tests...)
	if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryRuleIsTested requires, for every alerting rule (alert name and
// severity), a test case where it fires and one, evaluated after its `for`
// duration, where it stays silent; and a promql_expr_test for every recording
// rule. It also rejects test cases of alert names the rules do not define
// (promtool passes an empty exp_alerts of a misspelt name).
func TestEveryRuleIsTested(t *testing.T) {
	rules := readRules(t)
	var cases []alertCase
	var exprs []string
	for _, p := range testPaths(t) {
		c, e := readTests(t, p)
		cases = append(cases, c...)
		exprs = append(exprs, e...)
	}

	names := map[string]bool{}
	for _, r := range rules {
		if r.record != "" {
			re := regexp.MustCompile(`(^|[^A-Za-z0-9_:])` + regexp.QuoteMeta(r.record) + `($|[^A-Za-z0-9_:])`)
			if !slices.ContainsFunc(exprs, re.MatchString) {
				t.Errorf("recording rule %s has no promql_expr_test", r.record)
			}
			continue
		}
		names[r.alert] = true
		if r.severity != "warning" && r.severity != "critical" {
			t.Errorf("alert %s has severity %q, want warning or critical", r.alert, r.severity)
			continue
		}
		var fires, silent bool
		for _, c := range cases {
			if c.alertname != r.alert {
				continue
			}
			if slices.Contains(c.severities, r.severity) {
				fires = true
			} else if c.evalTime >= r.forDuration {
				silent = true
			}
		}
		if !fires {
			t.Errorf("alert %s (%s) has no test case where it fires", r.alert, r.severity)
		}
		if !silent {
			t.Errorf("alert %s (%s) has no test case where it stays silent after its for: %s", r.alert, r.severity, r.forDuration)
		}
	}
	for _, c := range cases {
		if !names[c.alertname] {
			t.Errorf("%s: test case of alert %q, which %s does not define", c.where, c.alertname, rulesFile)
		}
	}
}

// ensurePromtool runs deploy/local/promtool.sh and returns the promtool it
// prints.
func ensurePromtool(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "local", "promtool.sh"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.Bytes())
	}
	p := strings.TrimSpace(stdout.String())
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s printed %q, which is not an executable promtool (%v)\n%s", script, p, err, stderr.Bytes())
	}
	return p
}

// testPaths returns the promtool unit test files.
func testPaths(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(testFiles)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no promtool test files match %s", testFiles)
	}
	return paths
}

// rule is one rule of the rules file: an alert (with its severity and for
// duration) or a recording rule.
type rule struct {
	alert, record string
	severity      string
	forDuration   time.Duration
}

// The rules file and the test files are read line by line rather than with a
// YAML library, which the module does not depend on; TestPromtool compares
// the number of rules read here with promtool's.
var (
	ruleStart  = regexp.MustCompile(`^\s*- (alert|record):\s*(\S+)\s*$`)
	keyValue   = regexp.MustCompile(`^(\s*)(- )?([a-z_]+):\s*(.*?)\s*$`)
	listItem   = regexp.MustCompile(`^(\s*)- `)
	blankOrRem = regexp.MustCompile(`^\s*(#.*)?$`)
)

// readRules reads the rules of the rules file.
func readRules(t *testing.T) []rule {
	t.Helper()
	var rules []rule
	eachLine(t, rulesFile, func(n int, line string) {
		if m := ruleStart.FindStringSubmatch(line); m != nil {
			r := rule{record: m[2]}
			if m[1] == "alert" {
				r = rule{alert: m[2]}
			}
			rules = append(rules, r)
			return
		}
		m := keyValue.FindStringSubmatch(line)
		if m == nil || len(rules) == 0 || rules[len(rules)-1].alert == "" {
			return
		}
		r := &rules[len(rules)-1]
		switch m[3] {
		case "severity":
			r.severity = unquote(m[4])
		case "for":
			d, err := time.ParseDuration(unquote(m[4]))
			if err != nil {
				t.Fatalf("%s:%d: for: %v", rulesFile, n, err)
			}
			r.forDuration = d
		}
	})
	return rules
}

// alertCase is one alert_rule_test entry: the alert name, when it is
// evaluated and the severities of the alerts it expects.
type alertCase struct {
	where      string
	alertname  string
	evalTime   time.Duration
	severities []string
}

// readTests reads the alert_rule_test entries and the promql_expr_test
// expressions of one test file. An expected alert must carry a severity label
// and annotations.
func readTests(t *testing.T, path string) ([]alertCase, []string) {
	t.Helper()
	var (
		cases   []alertCase
		exprs   []string
		section string
		indent  = -1 // indentation of the entries of the current alert_rule_test
		cur     *alertCase
		alerts  int // expected alerts of cur, and how many had annotations
		annots  int
	)
	finish := func() {
		if cur == nil {
			return
		}
		if cur.alertname == "" {
			t.Errorf("%s: alert_rule_test entry without alertname", cur.where)
		}
		if len(cur.severities) != alerts || annots != alerts {
			t.Errorf("%s: %d expected alert(s) with %d severity label(s) and %d exp_annotations: every expected alert needs both",
				cur.where, alerts, len(cur.severities), annots)
		}
		cases = append(cases, *cur)
		cur, alerts, annots = nil, 0, 0
	}
	eachLine(t, path, func(n int, line string) {
		m := keyValue.FindStringSubmatch(line)
		if m == nil {
			return
		}
		key, value := m[3], unquote(m[4])
		switch key {
		case "alert_rule_test", "promql_expr_test", "input_series":
			finish()
			section, indent = key, -1
			return
		case "interval":
			if m[2] != "" { // a new test group
				finish()
				section, indent = "", -1
				return
			}
		}
		if section == "promql_expr_test" && key == "expr" {
			exprs = append(exprs, value)
		}
		if section != "alert_rule_test" {
			return
		}
		if d := listItem.FindStringSubmatch(line); d != nil && (indent < 0 || len(d[1]) == indent) {
			finish()
			indent = len(d[1])
			cur = &alertCase{where: fmt.Sprintf("%s:%d", path, n)}
		}
		if cur == nil {
			return
		}
		switch key {
		case "alertname":
			cur.alertname = value
		case "eval_time":
			d, err := time.ParseDuration(value)
			if err != nil {
				t.Fatalf("%s:%d: eval_time: %v", path, n, err)
			}
			cur.evalTime = d
		case "exp_labels":
			alerts++
		case "exp_annotations":
			annots++
		case "severity":
			cur.severities = append(cur.severities, value)
		}
	})
	finish()
	return cases, exprs
}

// eachLine calls f with every line of path that is neither blank nor a
// comment, and its line number.
func eachLine(t *testing.T, path string, f func(n int, line string)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; s.Scan(); n++ {
		if line := s.Text(); !blankOrRem.MatchString(line) {
			f(n, line)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// unquote strips the quotes of a YAML scalar.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}
