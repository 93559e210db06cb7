package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/ports"
)

// wrapErr names the failed operation and marks failures that may succeed
// when retried with ports.ErrTransient.
func wrapErr(op string, err error) error {
	if isTransient(err) {
		return fmt.Errorf("redis %s: %w: %w", op, ports.ErrTransient, err)
	}
	return fmt.Errorf("redis %s: %w", op, err)
}

// isTransient reports whether err is a connection-level failure (anything
// that is not a server error reply, except a canceled context) or one of
// the server errors that announce a temporary condition (among them the
// redirections of a slot in migration that the client gave up following).
func isTransient(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var serverErr goredis.Error
	if !errors.As(err, &serverErr) {
		return true
	}
	return goredis.IsLoadingError(err) || goredis.IsReadOnlyError(err) ||
		goredis.IsClusterDownError(err) || goredis.IsTryAgainError(err) ||
		goredis.IsMasterDownError(err) || goredis.IsMaxClientsError(err) ||
		goredis.IsNoReplicasError(err) || refusedDuringMigration(err)
}

// errUnexpectedReply reports a script reply of an unexpected shape (a bug or
// a mismatch between the Go code and the scripts in Redis).
var errUnexpectedReply = errors.New("unexpected script reply")

func unexpected(op string, reply any) error {
	return fmt.Errorf("redis %s: %w: %#v", op, errUnexpectedReply, reply)
}
