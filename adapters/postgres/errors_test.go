package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-dev/seckill/ports"
)

func TestIsTransient(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "x"} }
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"admin shutdown", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"cannot connect now", pg("57P03"), true},
		{"statement timeout", pg("57014"), true},
		{"lock timeout", pg("55P03"), true},
		{"connection failure", pg("08006"), true},
		{"too many connections", pg("53300"), true},
		{"wrapped deadlock", fmt.Errorf("outer: %w", pg("40P01")), true},
		{"unique violation", pg("23505"), false},
		{"syntax error", pg("42601"), false},
		{"conn closed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"net error", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"deadline", context.DeadlineExceeded, true},
		{"canceled", context.Canceled, false},
		{"plain", errors.New("bug"), false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := isTransient(c.err); got != c.want {
			t.Errorf("%s: isTransient(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestClassifyKeepsSentinelAndOriginalAndCounts(t *testing.T) {
	s := &Store{metrics: newMetrics()}
	orig := &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	err := s.classify("take stock", orig)
	var got *pgconn.PgError
	if !errors.Is(err, ports.ErrTransient) || !errors.As(err, &got) || got != orig {
		t.Fatalf("classify = %v: want ErrTransient and the driver error reachable", err)
	}
	if err := s.classify("x", &pgconn.PgError{Code: "23505"}); errors.Is(err, ports.ErrTransient) {
		t.Fatalf("unique violation classified transient: %v", err)
	}
	if s.classify("x", nil) != nil {
		t.Fatal("classify(nil) != nil")
	}
	if n := testutil.ToFloat64(s.metrics.serializationFailures); n != 1 {
		t.Fatalf("pg_serialization_retry_total = %v, want 1", n)
	}
}
