package contracttest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/seckill-dev/seckill/ports"
)

func inboxEntry(messageID string) ports.InboxEntry {
	return ports.InboxEntry{
		MessageID: messageID, Topic: "ORDER_CREATE",
		ReservationID: "rsv_" + messageID, OrderID: "ord_" + messageID, DeliveryAttempt: 1,
	}
}

func testInbox(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	g1, g2 := "CG_A_"+uniq(), "CG_B_"+uniq()
	m1, m2, m3 := "evt_1"+uniq(), "evt_2"+uniq(), "evt_3"+uniq()

	var first []string
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		first, err = tx.ClaimInbox(ctx, g1, []ports.InboxEntry{inboxEntry(m2), inboxEntry(m1), inboxEntry(m2)})
		if err != nil {
			return err
		}
		again, err := tx.ClaimInbox(ctx, g1, []ports.InboxEntry{inboxEntry(m1)})
		if err != nil {
			return err
		}
		if len(again) != 0 {
			return fmt.Errorf("claiming %s again in the same transaction returned %v, want nothing", m1, again)
		}
		return tx.FinishInbox(ctx, g1, []ports.InboxResult{
			{MessageID: m1, Status: ports.InboxSucceeded},
			{MessageID: m2, Status: ports.InboxRejected, Detail: "RESERVATION_EXPIRED"},
		})
	})
	if !slices.Equal(first, []string{m2, m1}) {
		t.Fatalf("ClaimInbox = %v, want [%s %s] (input order, repeated id once)", first, m2, m1)
	}

	var second, other []string
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if second, err = tx.ClaimInbox(ctx, g1, []ports.InboxEntry{inboxEntry(m1), inboxEntry(m3), inboxEntry(m2)}); err != nil {
			return err
		}
		if other, err = tx.ClaimInbox(ctx, g2, []ports.InboxEntry{inboxEntry(m1)}); err != nil {
			return err
		}
		if err := tx.FinishInbox(ctx, g1, []ports.InboxResult{{MessageID: m3, Status: ports.InboxDuplicate}}); err != nil {
			return err
		}
		return tx.FinishInbox(ctx, g2, []ports.InboxResult{{MessageID: m1, Status: ports.InboxNoop}})
	})
	if !slices.Equal(second, []string{m3}) {
		t.Fatalf("ClaimInbox after commit = %v, want only the new %s", second, m3)
	}
	if !slices.Equal(other, []string{m1}) {
		t.Fatalf("ClaimInbox of another group = %v, want [%s] (groups are independent)", other, m1)
	}

	want := []struct {
		group, id string
		status    ports.InboxStatus
	}{
		{g1, m1, ports.InboxSucceeded}, {g1, m2, ports.InboxRejected},
		{g1, m3, ports.InboxDuplicate}, {g2, m1, ports.InboxNoop},
	}
	var errUnknown error
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		for _, w := range want {
			got, err := tx.InboxStatusOf(ctx, w.group, w.id)
			if err != nil {
				return err
			}
			if got != w.status {
				return fmt.Errorf("InboxStatusOf(%s, %s) = %s, want %s", w.group, w.id, got, w.status)
			}
		}
		_, errUnknown = tx.InboxStatusOf(ctx, g2, m2)
		return nil
	})
	wantErr(t, "InboxStatusOf of an unclaimed message", errUnknown, ports.ErrNotFound)
}

// testInboxConcurrent: concurrent transactions claiming one message id;
// exactly one of them gets it.
func testInboxConcurrent(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	g, m := "CG_"+uniq(), "evt_"+uniq()
	const n = 4
	claimed := make([]int, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		errs[i] = uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			ids, err := tx.ClaimInbox(ctx, g, []ports.InboxEntry{inboxEntry(m)})
			if err != nil {
				return err
			}
			claimed[i] = len(ids)
			return tx.FinishInbox(ctx, g, []ports.InboxResult{{MessageID: m, Status: ports.InboxSucceeded}})
		})
	})
	total := 0
	for i := range n {
		noErr(t, "concurrent ClaimInbox", errs[i])
		total += claimed[i]
	}
	if total != 1 {
		t.Fatalf("%d concurrent transactions claimed one message %d times in total, want 1", n, total)
	}
}
