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
// instance's consumers as its status page shows them, the reservations
// Redis holds whose order PostgreSQL does not keep (each with its Redis
// hash, PostgreSQL's record of it and the instances' log lines that name
// it), and the end of each instance's log. A part that cannot be read
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
	s.diagnoseHeld(ctx, &b, activityID)
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

// diagnoseHeldMax bounds how many held reservations a diagnosis details.
const diagnoseHeldMax = 3

// diagnoseHeld writes the reservations of the activity that Redis holds
// (a buyer's entry in a holders hash) while PostgreSQL has no live order
// for them: the releases in flight of the stock report. For each: its Redis
// hash, the holder entry, PostgreSQL's order, rejection, outcome and
// release outbox row, and the lines of the instances' logs that name it.
func (s *soak) diagnoseHeld(ctx context.Context, b *strings.Builder, activityID int64) {
	held, err := s.heldReservations(ctx, activityID)
	if err != nil {
		fmt.Fprintf(b, "  held: %v\n", err)
		return
	}
	rows, err := s.rig.pool.Query(ctx, `
		SELECT h.id, coalesce(o.status, '-'), coalesce(o.order_id, '-'),
		       coalesce(to_char(o.updated_at, 'HH24:MI:SS.MS'), '-'),
		       coalesce((SELECT reason FROM order_rejections r WHERE r.reservation_id = h.id), '-'),
		       coalesce((SELECT x.status || ' ' || coalesce(x.reason, '') FROM reservation_outcomes x WHERE x.reservation_id = h.id), '-'),
		       coalesce((SELECT string_agg(to_char(ob.published_at, 'HH24:MI:SS.MS'), ',') FROM event_outbox ob
		                 WHERE ob.topic = $2 AND ob.keys @> ARRAY[h.id]), '-')
		FROM unnest($1::text[]) AS h(id)
		LEFT JOIN orders o ON o.reservation_id = h.id
		WHERE o.status IS NULL OR o.status = 'CANCELED'`,
		heldIDs(held), string(ports.TopicInventoryCompensate))
	if err != nil {
		fmt.Fprintf(b, "  held: %v\n", err)
		return
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, status, orderID, updated, rejection, outcome, published string
		if err := rows.Scan(&id, &status, &orderID, &updated, &rejection, &outcome, &published); err != nil {
			fmt.Fprintf(b, "  held: %v\n", err)
			return
		}
		if n++; n > diagnoseHeldMax {
			continue
		}
		h := held[id]
		fmt.Fprintf(b, "  held %s by user %s: order %s %s (updated %s), rejection %s, outcome %s, release published %s\n",
			id, h.user, orderID, status, updated, rejection, outcome, published)
		hash, err := s.rig.redisDB.HGetAll(ctx, h.hashKey).Result()
		fmt.Fprintf(b, "    redis %s: %v (err %v)\n", h.hashKey, hash, err)
		for _, in := range s.rig.instances {
			for _, l := range logLinesNaming(in.LogFile.Name(), id, diagnoseLogLines) {
				fmt.Fprintf(b, "    %s: %s\n", in.Name, l)
			}
		}
	}
	fmt.Fprintf(b, "  held: %d reservations in Redis's holders, %d without a live order (err %v)\n", len(held), n, rows.Err())
}

// heldReservation is a holder entry of a slot's holders hash.
type heldReservation struct {
	user, hashKey string
}

// heldReservations reads the holders hashes of the activity's slots (every
// SKU and lane) by reservation id.
func (s *soak) heldReservations(ctx context.Context, activityID int64) (map[string]heldReservation, error) {
	out := map[string]heldReservation{}
	pattern := fmt.Sprintf("*{a%d:s*}:holders", activityID)
	iter := s.rig.redisDB.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		m, err := s.rig.redisDB.HGetAll(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		prefix := strings.TrimSuffix(key, "holders") + "rsv:"
		for user, id := range m {
			out[id] = heldReservation{user: user, hashKey: prefix + id}
		}
	}
	return out, iter.Err()
}

func heldIDs(held map[string]heldReservation) []string {
	ids := make([]string, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	return ids
}

// logLinesNaming returns up to limit lines of the log at path that contain
// needle, cut to 400 bytes each.
func logLinesNaming(path, needle string, limit int) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, needle) && len(out) < limit {
			out = append(out, l[:min(len(l), 400)])
		}
	}
	return out
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
