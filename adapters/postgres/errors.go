package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seckill-dev/seckill/ports"
)

// SQLSTATE codes the adapter looks at.
const (
	codeUniqueViolation      = "23505"
	codeForeignKeyViolation  = "23503"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	codeLockNotAvailable     = "55P03"
	codeQueryCanceled        = "57014"
	codeAdminShutdown        = "57P01"
	codeCrashShutdown        = "57P02"
	codeCannotConnectNow     = "57P03"
	codeTooManyConnections   = "53300"
	classConnectionException = "08"
)

// transientCode reports whether a server error is worth retrying: a
// serialization failure, a deadlock, a lock or statement timeout, a
// terminated or restarting server, a connection exception or too many
// connections.
func transientCode(code string) bool {
	switch code {
	case codeSerializationFailure, codeDeadlockDetected, codeLockNotAvailable,
		codeQueryCanceled, codeAdminShutdown, codeCrashShutdown,
		codeCannotConnectNow, codeTooManyConnections:
		return true
	}
	return strings.HasPrefix(code, classConnectionException)
}

// isTransient reports whether err may succeed when retried. Server errors
// are judged by SQLSTATE; client-side failures count when the driver says
// the statement was never sent (pgconn.SafeToRetry), when the connection
// broke (network errors, unexpected EOF, a closed connection, a failed
// connect) or when the context's deadline passed. A canceled context is
// not transient: the caller gave up on purpose.
func isTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ports.ErrTransient) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientCode(pgErr.Code)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var (
		netErr     net.Error
		connectErr *pgconn.ConnectError
	)
	switch {
	case pgconn.SafeToRetry(err),
		pgconn.Timeout(err),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF),
		errors.As(err, &netErr),
		errors.As(err, &connectErr):
		return true
	}
	return false
}

// sqlState returns the SQLSTATE of a server error in err's chain, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// constraintOf returns the constraint named by a server error in err's
// chain, or "".
func constraintOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ConstraintName
	}
	return ""
}

// classify wraps err with the operation's name and, when it is worth
// retrying, with ports.ErrTransient; both the sentinel and the driver's
// error stay reachable through errors.Is / errors.As. It counts deadlocks
// and serialization failures. A nil err stays nil.
func (s *Store) classify(op string, err error) error {
	if err == nil {
		return nil
	}
	switch sqlState(err) {
	case codeDeadlockDetected:
		s.metrics.deadlocks.Inc()
	case codeSerializationFailure:
		s.metrics.serializationFailures.Inc()
	}
	if isTransient(err) && !errors.Is(err, ports.ErrTransient) {
		return fmt.Errorf("postgres: %s: %w: %w", op, ports.ErrTransient, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}
