package contracttest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

func testOutbox(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	id := uniq()
	msgs := []ports.OutboundMessage{
		{
			Topic: ports.TopicOrderEvent, MessageID: "evt_1" + id, Tag: "ORDER_CREATED",
			Keys: []string{"ord_" + id}, Body: []byte(`{"n":1}`), Properties: map[string]string{"k": "v"},
		},
		{
			Topic: ports.TopicOrderTimeout, MessageID: "evt_2" + id, Tag: "CANCEL_IF_UNPAID",
			Keys: []string{"ord_" + id}, DeliverAt: baseTime.Add(15 * time.Minute), Body: []byte(`{"n":2}`),
		},
		{
			Topic: ports.TopicOrderStateFIFO, MessageID: "evt_3" + id, Tag: "ORDER_STATE_CHANGED",
			Keys: []string{"ord_" + id}, MessageGroup: "ord_" + id, Body: []byte(`{"n":3}`),
		},
	}
	// claim returns what ClaimOutbox hands out, waiting (bounded) until it
	// hands out want rows: rows are only handed out once no transaction
	// that might precede them is in flight, and an adapter may count
	// unrelated transactions (PostgreSQL's fence is instance-wide), so a
	// claim may legitimately come back short for a while.
	claim := func(limit, want int) []ports.OutboxRecord {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got []ports.OutboxRecord
			txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
				var err error
				got, err = tx.ClaimOutbox(ctx, limit)
				return err
			})
			if len(got) >= want || time.Now().After(deadline) {
				return got
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Whether ClaimOutbox sees rows of its own transaction is not part of
	// the contract (the relay never writes outbox rows), so it is not
	// checked here.
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error { return tx.AppendOutbox(ctx, msgs) })

	recs := claim(10, len(msgs))
	if len(recs) != len(msgs) {
		t.Fatalf("ClaimOutbox(10) returned %d rows, want %d", len(recs), len(msgs))
	}
	for i, r := range recs {
		if i > 0 && r.ID <= recs[i-1].ID {
			t.Fatalf("ClaimOutbox ids %d then %d: want increasing ids, oldest first", recs[i-1].ID, r.ID)
		}
		if r.Attempts != 0 || !sameMessage(r.Message, msgs[i]) {
			t.Fatalf("row %d = %+v, want attempts 0 and message %+v", i, r, msgs[i])
		}
	}
	ids := func(rs []ports.OutboxRecord) []int64 {
		out := make([]int64, len(rs))
		for i, r := range rs {
			out[i] = r.ID
		}
		return out
	}
	all := ids(recs)
	if got := ids(claim(2, 2)); !slices.Equal(got, all[:2]) {
		t.Fatalf("ClaimOutbox(2) = %v, want %v", got, all[:2])
	}

	// Deferred into the future: not due.
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.DeferOutbox(ctx, all[:1], now.Add(time.Hour), "broker down")
	})
	if got := ids(claim(10, 2)); !slices.Equal(got, all[1:]) {
		t.Fatalf("ClaimOutbox after deferring row %d by an hour = %v, want %v", all[0], got, all[1:])
	}
	// Deferred into the past: due again, attempts counted.
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.DeferOutbox(ctx, all[:1], now.Add(-time.Second), "broker down again")
	})
	recs = claim(10, 3)
	if got := ids(recs); !slices.Equal(got, all) {
		t.Fatalf("ClaimOutbox after the deferral passed = %v, want %v", got, all)
	}
	if recs[0].Attempts != 2 {
		t.Fatalf("attempts of a row deferred twice = %d, want 2", recs[0].Attempts)
	}

	// Held into the future: not due, and no attempt counted; held into
	// the past: due again.
	hold := func(d time.Duration) {
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			return tx.HoldOutbox(ctx, all[1:2], now.Add(d))
		})
	}
	hold(time.Hour)
	if got := ids(claim(10, 2)); !slices.Equal(got, []int64{all[0], all[2]}) {
		t.Fatalf("ClaimOutbox after holding row %d for an hour = %v, want %v", all[1], got, []int64{all[0], all[2]})
	}
	hold(-time.Second)
	recs = claim(10, 3)
	if got := ids(recs); !slices.Equal(got, all) || recs[1].Attempts != 0 {
		t.Fatalf("ClaimOutbox after the hold passed = %v (attempts of the held row %d), want %v with no attempt counted",
			got, recs[1].Attempts, all)
	}

	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error { return tx.MarkPublished(ctx, all) })
	if got := claim(10, 0); len(got) != 0 {
		t.Fatalf("ClaimOutbox after MarkPublished = %v, want none", ids(got))
	}

	var pruned []int64
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		for _, step := range []struct {
			olderThan time.Time
			limit     int
		}{{now.Add(-time.Hour), 100}, {now.Add(time.Hour), 1}, {now.Add(time.Hour), 100}, {now.Add(time.Hour), 100}} {
			n, err := tx.PruneOutbox(ctx, step.olderThan, step.limit)
			if err != nil {
				return err
			}
			pruned = append(pruned, n)
		}
		return nil
	})
	if want := []int64{0, 1, 2, 0}; !slices.Equal(pruned, want) {
		t.Fatalf("PruneOutbox(before publishing, 100), (after, 1), (after, 100), (after, 100) = %v, want %v", pruned, want)
	}
}

func sameMessage(a, b ports.OutboundMessage) bool {
	propsA, propsB := a.Properties, b.Properties
	if len(propsA) == 0 && len(propsB) == 0 {
		propsA, propsB = nil, nil
	}
	return a.Topic == b.Topic && a.MessageID == b.MessageID && a.Tag == b.Tag &&
		slices.Equal(a.Keys, b.Keys) && a.MessageGroup == b.MessageGroup &&
		a.DeliverAt.Equal(b.DeliverAt) && string(a.Body) == string(b.Body) && maps.Equal(propsA, propsB)
}
