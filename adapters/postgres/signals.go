package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PoolStats is a snapshot of the connection pool's counters, the
// PostgreSQL side of the adaptive consumer limiter's signals (issue 29).
// The counters only grow over the pool's life; a reader takes the
// difference of two snapshots for an interval.
type PoolStats struct {
	// Acquires counts the successful acquires.
	Acquires int64
	// EmptyAcquires counts the successful acquires that found no idle
	// connection and waited for one to be released or constructed.
	EmptyAcquires int64
	// EmptyAcquireWait is the total time the empty acquires waited.
	EmptyAcquireWait time.Duration
	// Acquired is the number of connections in use now, Total the number
	// open (in use, idle or being constructed) and Max the pool's size.
	Acquired, Total, Max int32
}

// PoolStats returns the pool's counters now. It touches no connection.
func (s *Store) PoolStats() PoolStats {
	st := s.pool.Stat()
	return PoolStats{
		Acquires: st.AcquireCount(), EmptyAcquires: st.EmptyAcquireCount(), EmptyAcquireWait: st.EmptyAcquireWaitTime(),
		Acquired: st.AcquiredConns(), Total: st.TotalConns(), Max: st.MaxConns(),
	}
}

// lockWaitsQuery counts the sessions of this database waiting on a
// heavyweight lock (a row or a relation), whoever holds it.
const lockWaitsQuery = `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND datname = current_database()`

// LockWaits returns the number of sessions of the store's database that
// wait on a lock now, from one read of pg_stat_activity on a pooled
// connection. It is bounded only by ctx: the caller gives it a short
// deadline, since under pressure the acquire itself may wait.
func (s *Store) LockWaits(ctx context.Context) (int, error) {
	var n int
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return s.classify("count lock waits", conn.QueryRow(ctx, lockWaitsQuery).Scan(&n))
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
