package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/seckill-dev/seckill/ports"
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
)

// diagnoseLogLines is how many of the last lines of each instance's log a
// diagnosis shows.
const diagnoseLogLines = 15

// diagnose describes why an activity did not come to rest, for the
// soak's error: its orders by status, the outbox rows still owed (by
// topic, with their attempts and last error), the release tasks of its
// canceled orders, the messages quarantined or dead-lettered, each
// instance's consumers as its status page shows them, and the end of each
// instance's log. A part that cannot be read
// says so; it never fails.
func (s *soak) diagnose(ctx context.Context, activityID int64) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "diagnosis of activity %d:\n", activityID)
	s.diagnoseOrders(ctx, &b, activityID)
	s.diagnoseOutbox(ctx, &b)
	s.diagnoseReleases(ctx, &b, activityID)
	s.diagnoseSetAside(ctx, &b)
	for _, in := range s.rig.instances {
		s.diagnoseInstance(ctx, &b, in)
	}
	return b.String()
}

// diagnoseOrders writes the activity's orders by status.
func (s *soak) diagnoseOrders(ctx context.Context, b *strings.Builder, activityID int64) {
	rows, err := s.rig.pool.Query(ctx, `SELECT status, count(*) FROM orders WHERE activity_id = $1 GROUP BY status ORDER BY status`, activityID)
	if err != nil {
		fmt.Fprintf(b, "  orders: %v\n", err)
		return
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			fmt.Fprintf(b, "  orders: %v\n", err)
			return
		}
		parts = append(parts, fmt.Sprintf("%s %d", status, n))
	}
	fmt.Fprintf(b, "  orders: %s (err %v)\n", strings.Join(parts, ", "), rows.Err())
}

// diagnoseOutbox writes the unpublished outbox rows by topic: how many,
// the most attempts, when the first is due and one last error.
func (s *soak) diagnoseOutbox(ctx context.Context, b *strings.Builder) {
	rows, err := s.rig.pool.Query(ctx, `
		SELECT topic, count(*), max(attempts), extract(epoch FROM min(available_at) - now())::float8,
		       coalesce(max(last_error), '')
		FROM event_outbox WHERE published_at IS NULL GROUP BY topic ORDER BY topic`)
	if err != nil {
		fmt.Fprintf(b, "  outbox: %v\n", err)
		return
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var topic, lastErr string
		var count, attempts int64
		var dueIn float64
		if err := rows.Scan(&topic, &count, &attempts, &dueIn, &lastErr); err != nil {
			fmt.Fprintf(b, "  outbox: %v\n", err)
			return
		}
		n++
		fmt.Fprintf(b, "  outbox unpublished %s: %d rows, attempts up to %d, first due in %.1fs, last error %q\n",
			topic, count, attempts, dueIn, lastErr)
	}
	if n == 0 {
		fmt.Fprintf(b, "  outbox: every row published (err %v)\n", rows.Err())
	}
}

// diagnoseReleases writes the release tasks of the activity's canceled
// orders: how many have no outbox row (pruned or never written), how
// many are unpublished, and when the last one was published.
func (s *soak) diagnoseReleases(ctx context.Context, b *strings.Builder, activityID int64) {
	var canceled, noRow, unpublished int64
	var lastPublished *time.Time
	err := s.rig.pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE ob.id IS NULL), count(*) FILTER (WHERE ob.id IS NOT NULL AND ob.published_at IS NULL),
		       max(ob.published_at)
		FROM orders o
		LEFT JOIN event_outbox ob ON ob.topic = $2 AND ob.keys @> ARRAY[o.reservation_id]
		WHERE o.activity_id = $1 AND o.status = 'CANCELED'`,
		activityID, string(ports.TopicInventoryCompensate)).Scan(&canceled, &noRow, &unpublished, &lastPublished)
	if err != nil {
		fmt.Fprintf(b, "  releases: %v\n", err)
		return
	}
	last := "never"
	if lastPublished != nil {
		last = fmt.Sprintf("%.1fs ago", time.Since(*lastPublished).Seconds())
	}
	fmt.Fprintf(b, "  releases of canceled orders: %d canceled, %d without an outbox row, %d unpublished, last published %s\n",
		canceled, noRow, unpublished, last)
}

// diagnoseSetAside writes the messages the consumers set aside in the
// soak's database: quarantined ones (with their reason: a release whose
// reservation Redis no longer knows is RESERVATION_MISSING) and dead
// letters, by group. A task set aside is acknowledged, so the broker shows
// no lag for it while its effect never happened.
func (s *soak) diagnoseSetAside(ctx context.Context, b *strings.Builder) {
	rows, err := s.rig.pool.Query(ctx, `
		SELECT 'quarantined', consumer_group, reason, count(*) FROM message_quarantine GROUP BY consumer_group, reason
		UNION ALL
		SELECT 'dead-lettered', consumer_group, status || ' ' || error_class, count(*) FROM dead_letters
		GROUP BY consumer_group, status, error_class
		ORDER BY 1, 2, 3`)
	if err != nil {
		fmt.Fprintf(b, "  set aside: %v\n", err)
		return
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var kind, group, reason string
		var count int64
		if err := rows.Scan(&kind, &group, &reason, &count); err != nil {
			fmt.Fprintf(b, "  set aside: %v\n", err)
			return
		}
		n++
		fmt.Fprintf(b, "  %s %s: %d (%s)\n", kind, group, count, reason)
	}
	if n == 0 {
		fmt.Fprintf(b, "  set aside: no message quarantined or dead-lettered (err %v)\n", rows.Err())
	}
}

// diagnoseInstance writes the consumers section of the instance's status
// page and the last lines of its log.
func (s *soak) diagnoseInstance(ctx context.Context, b *strings.Builder, in *benchenv.Instance) {
	fmt.Fprintf(b, "  %s consumers: %s\n", in.Name, instanceConsumers(ctx, s.rig.httpc, in.Ops))
	data, err := os.ReadFile(in.LogFile.Name())
	if err != nil {
		fmt.Fprintf(b, "  %s log: %v\n", in.Name, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-diagnoseLogLines):]
	fmt.Fprintf(b, "  %s log (last %d lines):\n", in.Name, len(lines))
	for _, l := range lines {
		fmt.Fprintf(b, "    %s\n", l)
	}
}

// instanceConsumers is the compact JSON of the consumers section of the
// status page at ops, or why it could not be read.
func instanceConsumers(ctx context.Context, httpc *http.Client, ops string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ops+"/status.json", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err.Error()
	}
	var page struct {
		Consumers json.RawMessage `json:"consumers"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return fmt.Sprintf("status %d: %v", resp.StatusCode, err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, page.Consumers); err != nil {
		return err.Error()
	}
	return out.String()
}
