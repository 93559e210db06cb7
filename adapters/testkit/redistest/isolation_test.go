package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// serviceKeys is how many keys the isolation test leaves in the service's
// database, as a sale of some hundred thousand buyers would.
const serviceKeys = 500_000

// TestAdapterTestsLeaveTheServiceKeyspaceAlone fills database 0 (the
// service's, SECKILL_REDIS_DB's default) with 500,000 keys in the
// service's namespace, runs the Redis adapter's test package as a separate
// `go test` process while a MONITOR connection watches every command, and
// asserts that the package passed, that none of its commands walked or
// emptied database 0 or named a service key, and that every one of the
// service's keys is still there.
func TestAdapterTestsLeaveTheServiceKeyspaceAlone(t *testing.T) {
	addr := os.Getenv(EnvAddr)
	DB(t) // fails with the how-to when the stack is not there
	ctx := t.Context()
	svc := goredis.NewClient(&goredis.Options{Addr: addr, DB: 0})
	t.Cleanup(func() { _ = svc.Close() })

	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "sk:{isolation-" + hex.EncodeToString(b) + "}:"
	keys := make([]string, serviceKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	t.Cleanup(func() { unlinkAll(t, svc, keys) })
	start := time.Now()
	for lo := 0; lo < len(keys); lo += 10_000 {
		if _, err := svc.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range keys[lo:min(lo+10_000, len(keys))] {
				p.Set(ctx, k, "x", 0)
			}
			return nil
		}); err != nil {
			t.Fatalf("fill the service database: %v", err)
		}
	}
	t.Logf("wrote %d keys to database 0 in %s", len(keys), time.Since(start).Round(time.Millisecond))

	mon, err := monitor(ctx, addr, prefix)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-race", "-count=1", "./adapters/redis/")
	cmd.Dir = "../../.."
	start = time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	touched := mon.stop()
	if err != nil {
		t.Fatalf("go test ./adapters/redis/ with %d keys in the service database: %v\n%s", len(keys), err, out)
	}
	t.Logf("go test ./adapters/redis/ passed in %s beside %d service keys", took.Round(100*time.Millisecond), len(keys))
	if len(touched) > 0 {
		t.Errorf("%d commands walked, emptied or touched the service's database during the adapter tests; first: %q", len(touched), touched[:min(5, len(touched))])
	}

	var present int64
	for lo := 0; lo < len(keys); lo += 10_000 {
		n, err := svc.Exists(ctx, keys[lo:min(lo+10_000, len(keys))]...).Result()
		if err != nil {
			t.Fatal(err)
		}
		present += n
	}
	if present != int64(len(keys)) {
		t.Errorf("the service's keys were touched: %d of %d left", present, len(keys))
	}
}

// monitorTap is a MONITOR connection that keeps the commands that touch
// the service's keyspace (see touchesService).
type monitorTap struct {
	conn net.Conn
	done chan []string
}

// monitor opens a MONITOR connection to the Redis at addr that watches
// for commands touching database 0 or the keys under prefix.
func monitor(ctx context.Context, addr, prefix string) (*monitorTap, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		_ = conn.Close()
		return nil, fmt.Errorf("monitor: answer %q: %v", line, err)
	}
	m := &monitorTap{conn: conn, done: make(chan []string, 1)}
	go func() {
		var hits []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				m.done <- hits
				return
			}
			if touchesService(line, prefix) {
				hits = append(hits, strings.TrimSpace(line))
			}
		}
	}()
	return m, nil
}

// stop closes the connection and returns what it kept.
func (m *monitorTap) stop() []string {
	_ = m.conn.Close()
	return <-m.done
}

// touchesService reports whether a MONITOR line ("+<time> [<db>
// <client>] "<cmd>" ...") walks or empties the service's database 0 (SCAN,
// KEYS, RANDOMKEY, FLUSHDB), empties every database (FLUSHALL, SWAPDB), or
// names one of the service keys (prefix). Commands of a live service in
// database 0 are none of these.
func touchesService(line, prefix string) bool {
	open := strings.IndexByte(line, '[')
	q := strings.IndexByte(line, '"')
	if open < 0 || q < 0 {
		return false
	}
	name, _, _ := strings.Cut(strings.ToLower(line[q+1:]), `"`)
	switch name {
	case "flushall", "swapdb":
		return true
	case "scan", "keys", "randomkey", "flushdb":
		return strings.HasPrefix(line[open+1:], "0 ")
	}
	return strings.Contains(line, prefix)
}

// unlinkAll deletes keys by name, in pipelines.
func unlinkAll(t *testing.T, c *goredis.Client, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for lo := 0; lo < len(keys); lo += 10_000 {
		if err := c.Unlink(ctx, keys[lo:min(lo+10_000, len(keys))]...).Err(); err != nil {
			t.Errorf("remove the service keys: %v", err)
			return
		}
	}
}
