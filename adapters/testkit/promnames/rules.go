package promnames

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// RuleExprs reads the Prometheus rules file at path and returns the names of
// its recording rules and the expr of every rule, recording and alerting,
// in the order of the file.
//
// The module has no YAML library among its direct requirements, so the file
// is read line by line: a `record:` or `expr:` key takes a plain, single- or
// double-quoted scalar, possibly continued on more indented lines, or a
// literal (|) or folded (>) block scalar with any chomping indicator. The
// block and multi-line scalars of the other keys (annotations) are skipped,
// so their text is never taken for a key. Anchors, aliases, tags and flow
// collections are not understood; the rules files of this module use none.
func RuleExprs(path string) (records []string, exprs []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); {
		indent, key, rest, ok := splitKey(lines[i])
		if !ok {
			i++
			continue
		}
		value, next, err := readScalar(lines, i, indent, rest, key == "expr")
		if err != nil {
			return nil, nil, fmt.Errorf("promnames: %s:%d: %s: %w", path, i+1, key, err)
		}
		switch key {
		case "record":
			if strings.TrimSpace(value) == "" {
				return nil, nil, fmt.Errorf("promnames: %s:%d: empty record name", path, i+1)
			}
			records = append(records, strings.TrimSpace(value))
		case "expr":
			if strings.TrimSpace(value) == "" {
				return nil, nil, fmt.Errorf("promnames: %s:%d: empty expr", path, i+1)
			}
			exprs = append(exprs, value)
		}
		i = next
	}
	return records, exprs, nil
}

var (
	// keyLine matches a mapping key, possibly behind list item dashes:
	// indentation, dashes, key, and what follows the colon.
	keyLine = regexp.MustCompile(`^( *)((?:- +)*)([A-Za-z_][A-Za-z0-9_.-]*):(?:[ \t]+(.*?))?[ \t]*$`)
	// itemLine matches a list item without a key, whose value may be a
	// block or a multi-line scalar to skip.
	itemLine = regexp.MustCompile(`^( *)((?:- +)+)(.*?)[ \t]*$`)
	// blockHeader matches the header of a block scalar: style, chomping and
	// indentation indicators in either order, and an optional comment.
	blockHeader = regexp.MustCompile(`^([|>])([-+]?)([1-9]?)([-+]?)[ \t]*(?:#.*)?$`)
)

// splitKey splits a line into the column of its key or list item value, the
// key ("" for a list item without one) and the text after the colon. It
// reports false for blank and comment lines and for lines that start
// neither a key nor a list item.
func splitKey(line string) (indent int, key, rest string, ok bool) {
	if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
		return 0, "", "", false
	}
	if m := keyLine.FindStringSubmatch(line); m != nil {
		return len(m[1]) + len(m[2]), m[3], m[4], true
	}
	if m := itemLine.FindStringSubmatch(line); m != nil {
		return len(m[1]) + len(m[2]) - 1, "", m[3], true
	}
	return 0, "", "", false
}

// readScalar reads the value that starts with rest on line i, the key of
// which is at column indent, and returns it with the index of the first line
// after it. A key without a value (the parent of a nested mapping or list)
// yields "", unless valueNext says that the value is a plain scalar on the
// following lines.
func readScalar(lines []string, i, indent int, rest string, valueNext bool) (string, int, error) {
	switch {
	case strings.HasPrefix(rest, "|") || strings.HasPrefix(rest, ">"):
		return readBlock(lines, i, indent, rest)
	case strings.HasPrefix(rest, `"`) || strings.HasPrefix(rest, "'"):
		return readQuoted(lines, i, rest)
	case rest == "" || strings.HasPrefix(rest, "#"):
		if !valueNext {
			return "", i + 1, nil
		}
		return readPlain(lines, i, indent, "")
	default:
		return readPlain(lines, i, indent, rest)
	}
}

// indentOf returns the number of leading spaces of line.
func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// readPlain reads a plain scalar that starts with first and continues on
// the following lines indented more than indent, up to a comment line.
func readPlain(lines []string, i, indent int, first string) (string, int, error) {
	if c := strings.Index(first, " #"); c >= 0 {
		first = first[:c]
	}
	parts := []string{}
	if first = strings.TrimSpace(first); first != "" {
		parts = append(parts, first)
	}
	j := i + 1
	for ; j < len(lines); j++ {
		t := strings.TrimSpace(lines[j])
		if t == "" {
			parts = append(parts, "")
			continue
		}
		if indentOf(lines[j]) <= indent || strings.HasPrefix(t, "#") {
			break
		}
		if c := strings.Index(t, " #"); c >= 0 {
			t = strings.TrimSpace(t[:c])
		}
		parts = append(parts, t)
	}
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return fold(parts), j, nil
}

// fold joins the trimmed lines of a flow scalar: a line break between two
// lines becomes a space and each empty line a newline.
func fold(parts []string) string {
	var b strings.Builder
	for k, p := range parts {
		switch {
		case k == 0:
		case p == "":
			b.WriteByte('\n')
		case parts[k-1] != "":
			b.WriteByte(' ')
		}
		b.WriteString(p)
	}
	return b.String()
}

// readQuoted reads a single- or double-quoted scalar that starts with rest
// on line i and may continue on the following lines.
func readQuoted(lines []string, i int, rest string) (string, int, error) {
	quote := rest[0]
	var parts []string
	text := rest[1:]
	for j := i; j < len(lines); j++ {
		if j > i {
			text = strings.TrimSpace(lines[j])
		}
		if end := closingQuote(text, quote); end >= 0 {
			if tail := strings.TrimSpace(text[end+1:]); tail != "" && !strings.HasPrefix(tail, "#") {
				return "", 0, fmt.Errorf("text %q after the closing quote", tail)
			}
			parts = append(parts, text[:end])
			v, err := unquoteYAML(fold(trimParts(parts)), quote)
			return v, j + 1, err
		}
		parts = append(parts, text)
	}
	return "", 0, fmt.Errorf("unterminated %c-quoted scalar", quote)
}

// trimParts trims the white space that a line break leaves at the end of a
// line and at the start of the next one.
func trimParts(parts []string) []string {
	out := make([]string, len(parts))
	for k, p := range parts {
		if k < len(parts)-1 {
			p = strings.TrimRight(p, " \t")
		}
		if k > 0 {
			p = strings.TrimLeft(p, " \t")
		}
		out[k] = p
	}
	return out
}

// closingQuote returns the index of the quote that ends a scalar in text,
// or -1. In a single-quoted scalar a doubled quote is an escaped one; in a
// double-quoted one a backslash escapes the next character.
func closingQuote(text string, quote byte) int {
	for k := 0; k < len(text); k++ {
		switch {
		case quote == '"' && text[k] == '\\':
			k++
		case text[k] == quote && quote == '\'' && k+1 < len(text) && text[k+1] == '\'':
			k++
		case text[k] == quote:
			return k
		}
	}
	return -1
}

// unquoteYAML resolves the escapes of a quoted scalar's folded text: the
// doubled quote of a single-quoted scalar, and in a double-quoted one the
// escapes that YAML shares with Go, plus \/ and "\ ".
func unquoteYAML(s string, quote byte) (string, error) {
	if quote == '\'' {
		return strings.ReplaceAll(s, "''", "'"), nil
	}
	var b strings.Builder
	for s != "" {
		if strings.HasPrefix(s, `\/`) || strings.HasPrefix(s, `\ `) {
			b.WriteByte(s[1])
			s = s[2:]
			continue
		}
		r, _, tail, err := strconv.UnquoteChar(s, '"')
		if err != nil {
			return "", fmt.Errorf("double-quoted scalar: %w", err)
		}
		b.WriteRune(r)
		s = tail
	}
	return b.String(), nil
}

// readBlock reads a literal or folded block scalar whose header is rest on
// line i, the key of which is at column indent.
func readBlock(lines []string, i, indent int, rest string) (string, int, error) {
	m := blockHeader.FindStringSubmatch(rest)
	if m == nil || (m[2] != "" && m[4] != "") {
		return "", 0, fmt.Errorf("bad block scalar header %q", rest)
	}
	literal, chomp := m[1] == "|", m[2]+m[4]
	// The content's indentation: explicit, or that of the first non-empty
	// line.
	content := -1
	if m[3] != "" {
		content = indent + int(m[3][0]-'0')
	}
	j := i + 1
	var body []string
	for ; j < len(lines); j++ {
		line := lines[j]
		if strings.TrimSpace(line) == "" {
			body = append(body, "")
			continue
		}
		n := indentOf(line)
		if content < 0 {
			if n <= indent {
				break
			}
			content = n
		}
		if n < content {
			break
		}
		body = append(body, line[content:])
	}
	// Trailing empty lines belong to the scalar only when kept; the lines
	// after them are read again by the caller either way.
	trailing := 0
	for len(body) > 0 && body[len(body)-1] == "" {
		body = body[:len(body)-1]
		trailing++
	}
	var text string
	if literal {
		text = strings.Join(body, "\n")
	} else {
		text = foldBlock(body)
	}
	if len(body) > 0 {
		switch chomp {
		case "":
			text += "\n"
		case "+":
			text += "\n" + strings.Repeat("\n", trailing)
		}
	}
	return text, j, nil
}

// foldBlock joins the lines of a folded block scalar: a line break between
// two lines of text becomes a space, each empty line a newline, and lines
// indented more than the content keep their breaks.
func foldBlock(body []string) string {
	var b strings.Builder
	more := func(s string) bool { return strings.HasPrefix(s, " ") || strings.HasPrefix(s, "\t") }
	for k, line := range body {
		if k > 0 {
			prev := body[k-1]
			switch {
			case line == "":
				b.WriteByte('\n')
			case prev == "":
			case more(prev) || more(line):
				b.WriteByte('\n')
			default:
				b.WriteByte(' ')
			}
		} else if line == "" {
			b.WriteByte('\n')
		}
		b.WriteString(line)
	}
	return b.String()
}
