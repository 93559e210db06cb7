package contracttest

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// deadLetterRecord returns a record of a message of group that exhausted
// its retries, first seen at seen.
func deadLetterRecord(group, messageID string, seen time.Time) ports.DeadLetterRecord {
	return ports.DeadLetterRecord{
		ConsumerGroup: group, Topic: ports.TopicOrderCreate, MessageID: messageID, BrokerMessageID: "brk-" + uniq(),
		Tag: "CREATE_ORDER", Keys: []string{"rsv_" + messageID, "ord_" + messageID}, MessageGroup: "grp-" + messageID,
		ErrorClass: "RETRIES_EXHAUSTED", LastError: "not acknowledged after 16 deliveries", Attempts: 16,
		Body: []byte(`{"message_id":"` + messageID + `"}`), Properties: map[string]string{"message_id": messageID, "x": "1"},
		SeenAt: seen,
	}
}

// recordDeadLetter records r in its own transaction.
func recordDeadLetter(t *testing.T, uow ports.UnitOfWork, r ports.DeadLetterRecord) (int64, bool) {
	t.Helper()
	var (
		id      int64
		created bool
	)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		id, created, err = tx.RecordDeadLetter(ctx, r)
		return err
	})
	return id, created
}

// getDeadLetter reads a dead letter in its own transaction.
func getDeadLetter(t *testing.T, uow ports.UnitOfWork, id int64) ports.StoredDeadLetter {
	t.Helper()
	var d ports.StoredDeadLetter
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		d, err = tx.GetDeadLetter(ctx, id)
		return err
	})
	return d
}

// listDeadLetters lists dead letters in its own transaction and returns
// their ids.
func listDeadLetters(t *testing.T, uow ports.UnitOfWork, group string, limit int, before int64) ([]int64, []ports.DeadLetter) {
	t.Helper()
	var list []ports.DeadLetter
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		list, err = tx.ListDeadLetters(ctx, group, limit, before)
		return err
	})
	ids := make([]int64, len(list))
	for i, d := range list {
		ids[i] = d.ID
	}
	return ids, list
}

// checkStored compares a stored dead letter's payload with the record of
// its first arrival.
func checkStored(t *testing.T, what string, got ports.StoredDeadLetter, first ports.DeadLetterRecord) {
	t.Helper()
	r := got.Record
	if r.ConsumerGroup != first.ConsumerGroup || r.Topic != first.Topic || r.MessageID != first.MessageID ||
		r.Tag != first.Tag || !slices.Equal(r.Keys, first.Keys) || r.MessageGroup != first.MessageGroup ||
		!bytes.Equal(r.Body, first.Body) || !maps.Equal(r.Properties, first.Properties) {
		t.Fatalf("%s: record = %+v, want the first arrival's payload %+v", what, r, first)
	}
	if got.ConsumerGroup != first.ConsumerGroup || got.Topic != string(first.Topic) || got.MessageID != first.MessageID {
		t.Fatalf("%s: dead letter = %+v, want group %s, topic %s, message %s", what, got.DeadLetter,
			first.ConsumerGroup, first.Topic, first.MessageID)
	}
}

func testDeadLetters(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	var stats ports.DeadLetterStats
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stats, err = tx.DeadLetterStats(ctx)
		return err
	})
	if stats.Open != 0 || !stats.OldestOpenAt.IsZero() {
		t.Fatalf("DeadLetterStats of an empty store = %+v, want zero", stats)
	}

	g1, g2 := "CG_A_"+uniq(), "CG_B_"+uniq()
	t0 := baseTime
	first := deadLetterRecord(g1, "evt_"+uniq(), t0)
	id1, created := recordDeadLetter(t, uow, first)
	if !created || id1 <= 0 {
		t.Fatalf("RecordDeadLetter of a new message = (%d, %v), want a positive id, true", id1, created)
	}
	d := getDeadLetter(t, uow, id1)
	checkStored(t, "first arrival", d, first)
	want := ports.DeadLetter{ID: id1, ConsumerGroup: g1, Topic: string(first.Topic), MessageID: first.MessageID,
		ErrorClass: first.ErrorClass, LastError: first.LastError, Attempts: 16,
		FirstSeenAt: t0, LastSeenAt: t0, Status: "OPEN"}
	if !sameDeadLetter(d.DeadLetter, want) || d.Record.BrokerMessageID != first.BrokerMessageID || d.Record.Attempts != 16 {
		t.Fatalf("GetDeadLetter after the first arrival = %+v (broker id %s)\nwant %+v (broker id %s)",
			d.DeadLetter, d.Record.BrokerMessageID, want, first.BrokerMessageID)
	}

	// A later arrival (another broker message) updates the error, keeps the
	// larger attempts and the later last-seen time, keeps the payload.
	later := deadLetterRecord(g1, first.MessageID, t0.Add(time.Hour))
	later.Attempts, later.ErrorClass, later.LastError, later.Body = 3, "HANDLER_ERROR", "boom", []byte("other")
	if id, created := recordDeadLetter(t, uow, later); id != id1 || created {
		t.Fatalf("RecordDeadLetter of a later arrival = (%d, %v), want (%d, false)", id, created, id1)
	}
	d = getDeadLetter(t, uow, id1)
	checkStored(t, "later arrival", d, first)
	want.ErrorClass, want.LastError, want.LastSeenAt = "HANDLER_ERROR", "boom", t0.Add(time.Hour)
	if !sameDeadLetter(d.DeadLetter, want) || d.Record.BrokerMessageID != later.BrokerMessageID {
		t.Fatalf("GetDeadLetter after a later arrival = %+v (broker id %s)\nwant %+v (broker id %s)",
			d.DeadLetter, d.Record.BrokerMessageID, want, later.BrokerMessageID)
	}

	// Replayed: status and count; the same broker message again changes
	// nothing (it does not reopen); another one reopens.
	var counts []int32
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		n, err := tx.MarkReplayed(ctx, id1)
		counts = append(counts, n)
		return err
	})
	repeated := later
	repeated.SeenAt, repeated.Attempts, repeated.LastError = t0.Add(2*time.Hour), 30, "repeated"
	if id, created := recordDeadLetter(t, uow, repeated); id != id1 || created {
		t.Fatalf("RecordDeadLetter repeating a broker message = (%d, %v), want (%d, false)", id, created, id1)
	}
	d = getDeadLetter(t, uow, id1)
	want.Status, want.ReplayCount = "REPLAYED", 1
	if !sameDeadLetter(d.DeadLetter, want) {
		t.Fatalf("dead letter after a repeated broker message = %+v\nwant it unchanged %+v", d.DeadLetter, want)
	}
	reopen := deadLetterRecord(g1, first.MessageID, t0.Add(30*time.Minute))
	reopen.Attempts = 20
	if id, created := recordDeadLetter(t, uow, reopen); id != id1 || created {
		t.Fatalf("RecordDeadLetter after a replay = (%d, %v), want (%d, false)", id, created, id1)
	}
	d = getDeadLetter(t, uow, id1)
	want.Status, want.Attempts, want.ErrorClass, want.LastError = "OPEN", 20, reopen.ErrorClass, reopen.LastError
	if !sameDeadLetter(d.DeadLetter, want) {
		t.Fatalf("dead letter reopened by an older arrival = %+v\nwant %+v (last seen stays the later time)", d.DeadLetter, want)
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		n, err := tx.MarkReplayed(ctx, id1)
		counts = append(counts, n)
		if err != nil {
			return err
		}
		return tx.MarkResolved(ctx, id1)
	})
	if !slices.Equal(counts, []int32{1, 2}) {
		t.Fatalf("MarkReplayed returned %v, want [1 2]", counts)
	}
	d = getDeadLetter(t, uow, id1)
	if d.Status != "RESOLVED" || d.ReplayCount != 2 {
		t.Fatalf("after MarkResolved: status %s, replay count %d; want RESOLVED, 2", d.Status, d.ReplayCount)
	}

	// The same message id in another group is another dead letter; a zero
	// SeenAt is the transaction's time.
	id2, created := recordDeadLetter(t, uow, deadLetterRecord(g2, first.MessageID, t0.Add(10*time.Minute)))
	if !created || id2 == id1 {
		t.Fatalf("RecordDeadLetter of the message in another group = (%d, %v), want a new row", id2, created)
	}
	var (
		id3   int64
		txNow time.Time
	)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if txNow, err = tx.Now(ctx); err != nil {
			return err
		}
		id3, _, err = tx.RecordDeadLetter(ctx, deadLetterRecord(g2, "evt_"+uniq(), time.Time{}))
		return err
	})
	if d := getDeadLetter(t, uow, id3); !d.FirstSeenAt.Equal(txNow) || !d.LastSeenAt.Equal(txNow) {
		t.Fatalf("dead letter recorded with a zero SeenAt: first %v, last %v; want the transaction's Now %v",
			d.FirstSeenAt, d.LastSeenAt, txNow)
	}
	id4, _ := recordDeadLetter(t, uow, deadLetterRecord(g1, "evt_"+uniq(), t0.Add(20*time.Minute)))

	checkDeadLetterPages(t, uow, g1, g2, []int64{id1, id2, id3, id4})
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stats, err = tx.DeadLetterStats(ctx)
		return err
	})
	oldest := t0.Add(10 * time.Minute)
	if txNow.Before(oldest) {
		oldest = txNow
	}
	if stats.Open != 3 || !stats.OldestOpenAt.Equal(oldest) {
		t.Fatalf("DeadLetterStats = %+v, want 3 open, oldest %v", stats, oldest)
	}

	checkDeadLetterErrors(t, uow, id1, id4+1000)
}

// checkDeadLetterPages lists the dead letters ids (inserted in this order,
// ids[0] and ids[3] of g1, the others of g2) in pages.
func checkDeadLetterPages(t *testing.T, uow ports.UnitOfWork, g1, g2 string, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("dead letter ids %v do not increase in insertion order", ids)
		}
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	cases := []struct {
		group  string
		limit  int
		before int64
		want   []int64
	}{
		{"", 10, 0, newest},
		{"", 2, 0, newest[:2]},
		{"", 2, newest[1], newest[2:]},
		{g2, 10, 0, []int64{ids[2], ids[1]}},
		{g1, 10, ids[3], []int64{ids[0]}},
		{g1, 10, ids[0], nil},
		{"", 0, 0, nil},
	}
	for _, c := range cases {
		got, list := listDeadLetters(t, uow, c.group, c.limit, c.before)
		if !slices.Equal(got, c.want) {
			t.Fatalf("ListDeadLetters(group %q, limit %d, before %d) = %v, want %v", c.group, c.limit, c.before, got, c.want)
		}
		for _, d := range list {
			if stored := getDeadLetter(t, uow, d.ID); !sameDeadLetter(d, stored.DeadLetter) {
				t.Fatalf("listed dead letter %+v differs from GetDeadLetter's %+v", d, stored.DeadLetter)
			}
		}
	}
}

// checkDeadLetterErrors checks ErrNotFound for an unknown id; every call
// runs in its own transaction (a failed statement may abort it). The known
// id stays readable.
func checkDeadLetterErrors(t *testing.T, uow ports.UnitOfWork, known, unknown int64) {
	t.Helper()
	if d := getDeadLetter(t, uow, known); d.ID != known {
		t.Fatalf("GetDeadLetter(%d) returned dead letter %d", known, d.ID)
	}
	calls := map[string]func(ctx context.Context, tx ports.Tx) error{
		"GetDeadLetter": func(ctx context.Context, tx ports.Tx) error { _, err := tx.GetDeadLetter(ctx, unknown); return err },
		"MarkReplayed":  func(ctx context.Context, tx ports.Tx) error { _, err := tx.MarkReplayed(ctx, unknown); return err },
		"MarkResolved":  func(ctx context.Context, tx ports.Tx) error { return tx.MarkResolved(ctx, unknown) },
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		err := uow.InTx(t.Context(), calls[name])
		wantErr(t, name+" of an unknown dead letter", err, ports.ErrNotFound)
	}
}

func sameDeadLetter(a, b ports.DeadLetter) bool {
	return a.ID == b.ID && a.ConsumerGroup == b.ConsumerGroup && a.Topic == b.Topic && a.MessageID == b.MessageID &&
		a.ErrorClass == b.ErrorClass && a.LastError == b.LastError && a.Attempts == b.Attempts &&
		a.FirstSeenAt.Equal(b.FirstSeenAt) && a.LastSeenAt.Equal(b.LastSeenAt) &&
		a.ReplayCount == b.ReplayCount && a.Status == b.Status
}

// testDeadLettersConcurrent records one message from several transactions
// at once: one row, one creator, and nothing of a rolled back transaction.
func testDeadLettersConcurrent(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	g, m := "CG_"+uniq(), "evt_"+uniq()
	const n = 6
	ids := make([]int64, n)
	created := make([]bool, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		errs[i] = uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			var err error
			ids[i], created[i], err = tx.RecordDeadLetter(ctx, deadLetterRecord(g, m, baseTime.Add(time.Duration(i)*time.Second)))
			return err
		})
	})
	creators := 0
	for i := range n {
		noErr(t, "concurrent RecordDeadLetter", errs[i])
		if ids[i] != ids[0] {
			t.Fatalf("concurrent RecordDeadLetter of one message returned ids %v, want one id", ids)
		}
		if created[i] {
			creators++
		}
	}
	if creators != 1 {
		t.Fatalf("concurrent RecordDeadLetter of one message: %d calls created it, want 1", creators)
	}
	if got, _ := listDeadLetters(t, uow, g, 10, 0); !slices.Equal(got, ids[:1]) {
		t.Fatalf("dead letters of the group = %v, want only %d", got, ids[0])
	}

	err := uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.RecordDeadLetter(ctx, deadLetterRecord(g, "evt_"+uniq(), baseTime)); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("InTx = %v, want the callback's error", err)
	}
	if got, _ := listDeadLetters(t, uow, g, 10, 0); !slices.Equal(got, ids[:1]) {
		t.Fatalf("dead letters after a rolled back RecordDeadLetter = %v, want only %d", got, ids[0])
	}
	if st := getDeadLetter(t, uow, ids[0]); st.Status != "OPEN" {
		t.Fatalf("status %s, want OPEN", st.Status)
	}
}
