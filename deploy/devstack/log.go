package devstack

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Logger writes the stack's progress lines, "15:04:05 [stack] message",
// to one writer (stderr for the command). It is safe for concurrent use:
// components starting in parallel share it. A quiet Logger drops progress
// lines but still writes warnings.
type Logger struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
}

// NewLogger returns a Logger writing to w; quiet drops Infof lines.
func NewLogger(w io.Writer, quiet bool) *Logger {
	return &Logger{w: w, quiet: quiet}
}

// Infof writes a progress line unless the Logger is quiet.
func (l *Logger) Infof(format string, args ...any) {
	if l == nil || l.quiet {
		return
	}
	l.write("", format, args...)
}

// Warnf writes a warning line, also when the Logger is quiet.
func (l *Logger) Warnf(format string, args ...any) {
	if l == nil {
		return
	}
	l.write("WARNING: ", format, args...)
}

// Raw writes text as it is (for example the tail of a log file), unless the
// Logger is quiet.
func (l *Logger) Raw(text string) {
	if l == nil || l.quiet || text == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, text)
}

func (l *Logger) write(prefix, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = fmt.Fprintf(l.w, "%s [stack] %s%s\n", time.Now().Format("15:04:05"), prefix, fmt.Sprintf(format, args...))
}

// since formats the milliseconds elapsed since t0, as the progress lines
// report durations.
func since(t0 time.Time) string {
	return fmt.Sprintf("%d ms", time.Since(t0).Milliseconds())
}
