// Package promnames reads the metric names that Prometheus alert and
// recording rules and Grafana dashboards use, and the names a service
// exports, so that tests can check that every rule and panel queries a
// metric the service really serves on /metrics.
//
// MetricNames finds the metric names of a PromQL expression with a small
// lexer of its own rather than the Prometheus parser, so the module does not
// depend on github.com/prometheus/prometheus. It accepts Grafana's template
// variables ($__rate_interval, $var, ${var}, [[var]]), which the Prometheus
// parser would reject. RuleExprs reads a rules file and DashboardExprs a
// dashboard; ExportedNames reads a text exposition.
package promnames

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// keywords are the PromQL words that can never be a metric name:
// aggregation operators, set and comparison modifiers, binary keyword
// operators, the offset modifier and the special float literals. The lexer
// of Prometheus matches them case-insensitively, and so does MetricNames.
var keywords = map[string]bool{
	// Aggregation operators.
	"sum": true, "min": true, "max": true, "avg": true, "group": true,
	"stddev": true, "stdvar": true, "count": true, "count_values": true,
	"bottomk": true, "topk": true, "quantile": true, "limitk": true,
	"limit_ratio": true,
	// Binary operators spelt as words.
	"and": true, "or": true, "unless": true, "atan2": true,
	// Modifiers.
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "bool": true, "offset": true,
	// Float literals.
	"inf": true, "nan": true,
}

// labelListKeywords are the keywords followed by a parenthesised list of
// label names; the list is required after the first four and optional
// after group_left and group_right.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// MetricNames returns the metric names that the PromQL expression expr
// selects, sorted and without duplicates.
//
// A name is an identifier that is neither a keyword nor followed by an
// opening parenthesis (which makes it a function or an aggregation), or the
// value of an equality matcher on __name__, or a quoted name standing alone
// in a matcher block ({"name", label="value"}). Names built from template
// variables (${prefix}_total) and names only matched by a regular expression
// are not returned. Recording-rule names such as job:foo:ratio are returned
// like any other name, so a caller removes those that its rules define.
//
// String literals, label matchers, the label lists of by, without, on,
// ignoring, group_left and group_right, range and subquery brackets,
// durations, numbers and Grafana template variables are skipped. An error
// reports an unterminated string, unbalanced brackets or a character that
// PromQL does not use.
func MetricNames(expr string) ([]string, error) {
	l := &lexer{src: expr}
	if err := l.run(); err != nil {
		return nil, err
	}
	slices.Sort(l.names)
	return slices.Compact(l.names), nil
}

// lexer walks a PromQL expression and collects the metric names it finds.
type lexer struct {
	src   string
	pos   int
	depth int // open parentheses
	names []string
}

// errorf returns an error that says where in the expression it occurred.
func (l *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("promnames: offset %d of %q: %s", l.pos, l.src, fmt.Sprintf(format, args...))
}

// run lexes the whole expression.
func (l *lexer) run() error {
	for {
		l.skipSpace()
		if l.pos >= len(l.src) {
			break
		}
		c := l.src[l.pos]
		switch {
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.readString(); err != nil {
				return err
			}
		case c == '{':
			// A matcher block without a name in front: {__name__="x"} or
			// {"x"}.
			if err := l.matchers(); err != nil {
				return err
			}
		case c == '[':
			if err := l.skipBrackets(); err != nil {
				return err
			}
		case c == '(':
			l.depth++
			l.pos++
		case c == ')':
			if l.depth == 0 {
				return l.errorf("unbalanced )")
			}
			l.depth--
			l.pos++
		case c == '}' || c == ']':
			return l.errorf("unbalanced %c", c)
		case c == '$':
			if err := l.skipVariable(); err != nil {
				return err
			}
		case isDigit(c) || (c == '.' && l.pos+1 < len(l.src) && isDigit(l.src[l.pos+1])):
			l.skipNumber()
		case isIdentStart(c):
			if err := l.identifier(); err != nil {
				return err
			}
		case strings.IndexByte("+-*/%^=!<>,@", c) >= 0:
			l.pos++
		default:
			return l.errorf("unexpected character %q", c)
		}
	}
	if l.depth != 0 {
		return l.errorf("%d unclosed (", l.depth)
	}
	return nil
}

// skipSpace skips white space and # comments, which run to the end of the
// line.
func (l *lexer) skipSpace() {
	for l.pos < len(l.src) {
		switch c := l.src[l.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			l.pos++
		case c == '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		default:
			return
		}
	}
}

// peek returns the next character after white space, or 0 at the end.
func (l *lexer) peek() byte {
	l.skipSpace()
	if l.pos >= len(l.src) {
		return 0
	}
	return l.src[l.pos]
}

// identifier reads an identifier and records it when it names a metric.
func (l *lexer) identifier() error {
	start := l.pos
	for l.pos < len(l.src) && isIdentChar(l.src[l.pos]) {
		l.pos++
	}
	word := l.src[start:l.pos]
	if l.pos < len(l.src) && l.src[l.pos] == '$' {
		// A name made from a template variable (seckill_${suffix}): skip
		// the rest of it; its value is unknown.
		return l.skipVariable()
	}
	lower := strings.ToLower(word)
	if keywords[lower] {
		if labelListKeywords[lower] {
			return l.labelList(lower)
		}
		return nil
	}
	switch l.peek() {
	case '(':
		return nil // a function
	case '{':
		l.names = append(l.names, word)
		return l.matchers()
	}
	l.names = append(l.names, word)
	return nil
}

// labelList skips the parenthesised label names after keyword.
func (l *lexer) labelList(keyword string) error {
	if l.peek() != '(' {
		if keyword == "group_left" || keyword == "group_right" {
			return nil
		}
		return l.errorf("%s without a label list", keyword)
	}
	l.pos++
	for {
		switch c := l.peek(); {
		case c == 0:
			return l.errorf("unterminated label list of %s", keyword)
		case c == ')':
			l.pos++
			return nil
		case c == '"' || c == '\'' || c == '`':
			if _, err := l.readString(); err != nil {
				return err
			}
		case c == '$':
			if err := l.skipVariable(); err != nil {
				return err
			}
		case c == ',':
			l.pos++
		case isIdentStart(c):
			for l.pos < len(l.src) && isIdentChar(l.src[l.pos]) {
				l.pos++
			}
		default:
			return l.errorf("unexpected character %q in the label list of %s", c, keyword)
		}
	}
}

// matchers reads a {...} matcher block and records the metric names it
// names: the value of __name__="x" and a quoted name standing alone.
func (l *lexer) matchers() error {
	l.pos++ // {
	for {
		switch c := l.peek(); {
		case c == 0:
			return l.errorf("unterminated {")
		case c == '}':
			l.pos++
			return nil
		case c == ',':
			l.pos++
			continue
		}
		label, quoted, err := l.matcherOperand()
		if err != nil {
			return err
		}
		op := l.matchOperator()
		if op == "" {
			if quoted {
				l.names = append(l.names, label) // {"metric.name"}
				continue
			}
			return l.errorf("label %s without a match operator", label)
		}
		value, valueQuoted, err := l.matcherOperand()
		if err != nil {
			return err
		}
		if label == "__name__" && op == "=" && valueQuoted {
			l.names = append(l.names, value)
		}
	}
}

// matcherOperand reads a label name, a string or a template variable of a
// matcher block. It reports whether the operand was a string; the string
// is returned unquoted.
func (l *lexer) matcherOperand() (string, bool, error) {
	switch c := l.peek(); {
	case c == '"' || c == '\'' || c == '`':
		s, err := l.readString()
		return s, true, err
	case c == '$':
		return "", false, l.skipVariable()
	case isIdentStart(c):
		start := l.pos
		for l.pos < len(l.src) && isIdentChar(l.src[l.pos]) {
			l.pos++
		}
		if l.pos < len(l.src) && l.src[l.pos] == '$' {
			return "", false, l.skipVariable()
		}
		return l.src[start:l.pos], false, nil
	case c == 0:
		return "", false, l.errorf("unterminated {")
	default:
		return "", false, l.errorf("unexpected character %q in a matcher block", c)
	}
}

// matchOperator reads =, !=, =~ or !~ and returns "" when none follows.
func (l *lexer) matchOperator() string {
	l.skipSpace()
	for _, op := range []string{"=~", "!~", "!=", "="} {
		if strings.HasPrefix(l.src[l.pos:], op) {
			l.pos += len(op)
			return op
		}
	}
	return ""
}

// readString reads a string literal and returns its value.
func (l *lexer) readString() (string, error) {
	quote := l.src[l.pos]
	start := l.pos
	l.pos++
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == quote:
			l.pos++
			return unquote(l.src[start:l.pos])
		case c == '\\' && quote != '`':
			l.pos += 2
		case c == '\n' && quote != '`':
			l.pos = start
			return "", l.errorf("newline in string")
		default:
			l.pos++
		}
	}
	l.pos = start
	return "", l.errorf("unterminated string")
}

// unquote returns the value of the quoted string literal s, which may be
// quoted with ", ' or ` and uses Go's escapes.
func unquote(s string) (string, error) {
	quote := s[0]
	body := s[1 : len(s)-1]
	if quote == '`' {
		return body, nil
	}
	var b strings.Builder
	for body != "" {
		r, _, rest, err := strconv.UnquoteChar(body, quote)
		if err != nil {
			return "", fmt.Errorf("promnames: string %s: %w", s, err)
		}
		b.WriteRune(r)
		body = rest
	}
	return b.String(), nil
}

// skipBrackets skips a range or subquery bracket ([5m], [1h:30s],
// [$__rate_interval], [${__range}]); brackets nest for Grafana's old
// [[var]] syntax. A matcher block or a string inside the brackets means
// that a ] is missing.
func (l *lexer) skipBrackets() error {
	start := l.pos
	depth := 0
	for l.pos < len(l.src) {
		switch l.src[l.pos] {
		case '[':
			depth++
		case ']':
			depth--
			if depth == 0 {
				l.pos++
				return nil
			}
		case '$':
			if err := l.skipVariable(); err != nil {
				return err
			}
			continue
		case '{', '}', '"', '\'', '`':
			l.pos = start
			return l.errorf("unterminated [")
		}
		l.pos++
	}
	l.pos = start
	return l.errorf("unterminated [")
}

// skipVariable skips a Grafana template variable: $name, ${name},
// ${name:format}, together with identifier characters that follow it, as
// in ${prefix}_total.
func (l *lexer) skipVariable() error {
	start := l.pos
	l.pos++ // $
	if l.pos < len(l.src) && l.src[l.pos] == '{' {
		end := strings.IndexByte(l.src[l.pos:], '}')
		if end < 0 {
			l.pos = start
			return l.errorf("unterminated ${")
		}
		l.pos += end + 1
	} else {
		n := l.pos
		for l.pos < len(l.src) && isIdentChar(l.src[l.pos]) && l.src[l.pos] != ':' {
			l.pos++
		}
		if l.pos == n {
			l.pos = start
			return l.errorf("$ without a variable name")
		}
	}
	for l.pos < len(l.src) && (isIdentChar(l.src[l.pos]) || l.src[l.pos] == '$') {
		if l.src[l.pos] == '$' {
			return l.skipVariable()
		}
		l.pos++
	}
	return nil
}

// skipNumber skips a number or a duration: 0.99, 1e3, 0x1f, 5m, 1h30m,
// 1_000. An exponent sign (1e-3) is left to the caller as an operator,
// which is harmless here.
func (l *lexer) skipNumber() {
	for l.pos < len(l.src) && (isIdentChar(l.src[l.pos]) && l.src[l.pos] != ':' || l.src[l.pos] == '.') {
		l.pos++
	}
}

// isDigit reports whether c is a decimal digit.
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isIdentStart reports whether c may start a metric name or keyword.
func isIdentStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == ':'
}

// isIdentChar reports whether c may continue a metric name.
func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }
