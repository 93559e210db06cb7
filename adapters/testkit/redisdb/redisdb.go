// Package redisdb leases a private Redis logical database to a test
// process or a benchmark run, so that neither scans, slows nor touches the
// keyspace a running service keeps in database 0.
//
// Claim walks databases 1..N-1 (N from CONFIG GET databases) and takes the
// first one that holds no lease key: in one optimistic transaction (WATCH
// the lease key, MULTI, FLUSHDB, SET lease, EXEC) it empties the database
// and writes its own lease with a TTL. A goroutine owned by the Lease
// renews the TTL until Release, which empties the database again and
// stops the goroutine. A process that dies leaves a lease that lapses
// after its TTL; the next claimant empties what it left. Database 0, the
// service's default (SECKILL_REDIS_DB), is never claimed.
package redisdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// LeaseKey is the key, in each leased database, that holds its holder's
// token.
const LeaseKey = "seckill:scratch-lease"

// DefaultTTL is how long a lease outlives its last renewal.
const DefaultTTL = 30 * time.Second

// claimWait bounds how long Claim waits for a database to become free
// when every one is leased.
const claimWait = 2 * time.Minute

// errLeased reports that a database is leased by someone else.
var errLeased = errors.New("database is leased")

// renew extends the lease when the caller still holds it.
var renew = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// Lease is one claimed logical database. Its Client is bound to that
// database; Release returns it.
type Lease struct {
	// DB is the leased logical database's index (>= 1).
	DB int
	// Client is a client for DB, closed by Release.
	Client *goredis.Client

	token string
	ttl   time.Duration
	stop  chan struct{}
	done  chan struct{}
}

// Claim leases a free logical database other than 0 on the Redis that opts
// addresses (opts.DB is ignored), empties it and keeps the lease alive
// until Release. ttl <= 0 means DefaultTTL. It waits up to two minutes
// when every database is leased.
func Claim(ctx context.Context, opts goredis.Options, ttl time.Duration) (*Lease, error) {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	n, err := databases(ctx, opts)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	deadline := time.Now().Add(claimWait)
	for {
		for db := 1; db < n; db++ {
			o := opts
			o.DB = db
			c := goredis.NewClient(&o)
			err := take(ctx, c, token, ttl)
			if err == nil {
				l := &Lease{DB: db, Client: c, token: token, ttl: ttl, stop: make(chan struct{}), done: make(chan struct{})}
				go l.keepAlive()
				return l, nil
			}
			_ = c.Close()
			if !errors.Is(err, errLeased) {
				return nil, fmt.Errorf("redisdb: claim database %d: %w", db, err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redisdb: all %d scratch databases stayed leased for %s", n-1, claimWait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisdb: claim: %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// databases reads how many logical databases the server has.
func databases(ctx context.Context, opts goredis.Options) (int, error) {
	c := goredis.NewClient(&opts)
	defer func() { _ = c.Close() }()
	kv, err := c.ConfigGet(ctx, "databases").Result()
	if err != nil {
		return 0, fmt.Errorf("redisdb: CONFIG GET databases: %w", err)
	}
	n, err := strconv.Atoi(kv["databases"])
	if err != nil || n < 2 {
		return 0, fmt.Errorf("redisdb: the server has %q logical databases; at least 2 are needed", kv["databases"])
	}
	return n, nil
}

// take empties c's database and writes the lease when no lease is there,
// atomically against another claimant.
func take(ctx context.Context, c *goredis.Client, token string, ttl time.Duration) error {
	err := c.Watch(ctx, func(tx *goredis.Tx) error {
		n, err := tx.Exists(ctx, LeaseKey).Result()
		if err != nil {
			return err
		}
		if n > 0 {
			return errLeased
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.FlushDB(ctx)
			p.Set(ctx, LeaseKey, token, ttl)
			return nil
		})
		return err
	}, LeaseKey)
	if errors.Is(err, goredis.TxFailedErr) {
		return errLeased
	}
	return err
}

// keepAlive renews the lease every third of its TTL until Release.
func (l *Lease) keepAlive() {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
			_ = renew.Run(ctx, l.Client, []string{LeaseKey}, l.token, l.ttl.Milliseconds()).Err()
			cancel()
		}
	}
}

// Release stops renewing, empties the database when the lease is still
// held, and closes the client. It is safe to call once.
func (l *Lease) Release(ctx context.Context) error {
	close(l.stop)
	<-l.done
	defer func() { _ = l.Client.Close() }()
	err := l.Client.Watch(ctx, func(tx *goredis.Tx) error {
		v, err := tx.Get(ctx, LeaseKey).Result()
		if errors.Is(err, goredis.Nil) || (err == nil && v != l.token) {
			return nil // lapsed: whoever holds it now owns the data
		}
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.FlushDBAsync(ctx)
			return nil
		})
		return err
	}, LeaseKey)
	if err != nil && !errors.Is(err, goredis.TxFailedErr) {
		return fmt.Errorf("redisdb: release database %d: %w", l.DB, err)
	}
	return nil
}
