package contracttest

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// listAudit lists audit records in its own transaction.
func listAudit(t *testing.T, uow ports.UnitOfWork, afterID int64, limit int) []ports.AuditRecord {
	t.Helper()
	var recs []ports.AuditRecord
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		recs, err = tx.ListAudit(ctx, afterID, limit)
		return err
	})
	return recs
}

// auditIDs returns the ids of recs.
func auditIDs(recs []ports.AuditRecord) []int64 {
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// checkAuditRecord compares a stored record with the entry it was
// appended from; wantParams is the entry's params as they read back.
func checkAuditRecord(t *testing.T, got ports.AuditRecord, e ports.AuditEntry, wantParams map[string]any) {
	t.Helper()
	if got.Actor != e.Actor || got.Action != e.Action || got.Target != e.Target || got.Outcome != e.Outcome {
		t.Fatalf("audit record %+v, want the fields of %+v", got, e)
	}
	if got.Params == nil || !reflect.DeepEqual(got.Params, wantParams) {
		t.Fatalf("audit record %d params %#v, want %#v", got.ID, got.Params, wantParams)
	}
}

// testAdminAudit checks ports.AdminAuditStore: entries read back with
// their fields, params as JSON decodes them (nil as an empty object),
// At = the appending transaction's Now, ids increasing in append order,
// pages by id, a transaction seeing its own entries, nothing of a rolled
// back transaction (its id not reused), invalid entries refused without
// storing anything, and concurrent appends all stored.
func testAdminAudit(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	if recs := listAudit(t, uow, 0, 10); len(recs) != 0 {
		t.Fatalf("empty store lists %+v", recs)
	}
	created := ports.AuditEntry{Actor: ports.UserActor(7), Action: ports.AuditCreateActivity,
		Target: ports.ActivityTarget(1, 2), Outcome: ports.AuditCreated, Params: map[string]any{
			"stock": 5, "payment_timeout": "15m0s", "ok": true, "none": nil,
			"nested": map[string]any{"list": []any{1, "b", false}},
		}}
	createdParams := map[string]any{"stock": float64(5), "payment_timeout": "15m0s", "ok": true, "none": nil,
		"nested": map[string]any{"list": []any{float64(1), "b", false}}}
	pass := ports.AuditEntry{Actor: ports.ActorReconciler, Action: ports.AuditReconcile, Outcome: ports.AuditOK}
	var appendedAt time.Time
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		appendedAt = now
		for _, e := range []ports.AuditEntry{created, pass} {
			if err := tx.AppendAudit(ctx, e); err != nil {
				return err
			}
		}
		own, err := tx.ListAudit(ctx, 0, 10)
		if err != nil {
			return err
		}
		if len(own) != 2 {
			return errors.New("a transaction does not see its own audit entries")
		}
		return nil
	})
	recs := listAudit(t, uow, 0, 10)
	if len(recs) != 2 || recs[0].ID <= 0 || recs[1].ID <= recs[0].ID {
		t.Fatalf("audit records %+v, want two with increasing ids", recs)
	}
	checkAuditRecord(t, recs[0], created, createdParams)
	checkAuditRecord(t, recs[1], pass, map[string]any{})
	for _, r := range recs {
		if !r.At.Equal(appendedAt) {
			t.Fatalf("audit record %d at %v, want the transaction's Now %v", r.ID, r.At, appendedAt)
		}
	}
	if got := auditIDs(listAudit(t, uow, recs[0].ID, 10)); !reflect.DeepEqual(got, []int64{recs[1].ID}) {
		t.Fatalf("ListAudit after %d = %v, want [%d]", recs[0].ID, got, recs[1].ID)
	}
	if got := auditIDs(listAudit(t, uow, 0, 1)); !reflect.DeepEqual(got, []int64{recs[0].ID}) {
		t.Fatalf("ListAudit limit 1 = %v, want [%d]", got, recs[0].ID)
	}
	if got := listAudit(t, uow, 0, 0); len(got) != 0 {
		t.Fatalf("ListAudit limit 0 = %+v, want none", got)
	}

	// A rolled back entry is gone and its id is not reused.
	errRollback := errors.New("roll back")
	var rolledBack int64
	err := uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		if err := tx.AppendAudit(ctx, ports.AuditEntry{Actor: "user:8", Action: ports.AuditProjectionRebuild, Outcome: ports.AuditOK}); err != nil {
			return err
		}
		own, err := tx.ListAudit(ctx, recs[1].ID, 10)
		if err != nil {
			return err
		}
		if len(own) != 1 {
			return errors.New("the appended entry is not visible in its transaction")
		}
		rolledBack = own[0].ID
		return errRollback
	})
	wantErr(t, "rolled back append", err, errRollback)
	if got := listAudit(t, uow, recs[1].ID, 10); len(got) != 0 {
		t.Fatalf("rolled back audit entry persisted: %+v", got)
	}
	nul := ports.AuditEntry{Actor: "user:9", Action: ports.AuditDLQReplay, Target: ports.DeadLetterTarget(3),
		Outcome: ports.AuditNotFound, Params: map[string]any{"reason": "a\x00b", "k\x00": 1}}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error { return tx.AppendAudit(ctx, nul) })
	after := listAudit(t, uow, recs[1].ID, 10)
	if len(after) != 1 || after[0].ID <= rolledBack {
		t.Fatalf("audit after a rollback %+v, want one entry with an id above the rolled back %d", after, rolledBack)
	}
	checkAuditRecord(t, after[0], nul, map[string]any{"reason": "a\uFFFDb", "k\uFFFD": float64(1)})

	checkInvalidAudit(t, uow, after[0].ID)
	checkConcurrentAudit(t, uow, after[0].ID)
}

// checkInvalidAudit appends invalid entries, each in its own transaction:
// every one fails and nothing is stored after lastID.
func checkInvalidAudit(t *testing.T, uow ports.UnitOfWork, lastID int64) {
	t.Helper()
	valid := ports.AuditEntry{Actor: "user:1", Action: ports.AuditReconcile, Outcome: ports.AuditOK}
	invalid := map[string]func(e *ports.AuditEntry){
		"no actor":          func(e *ports.AuditEntry) { e.Actor = "" },
		"no action":         func(e *ports.AuditEntry) { e.Action = "" },
		"no outcome":        func(e *ports.AuditEntry) { e.Outcome = "" },
		"NUL in target":     func(e *ports.AuditEntry) { e.Target = "dead_letter:\x00" },
		"invalid UTF-8":     func(e *ports.AuditEntry) { e.Actor = "user:\xff" },
		"unencodable param": func(e *ports.AuditEntry) { e.Params = map[string]any{"x": math.Inf(1)} },
		"a channel param":   func(e *ports.AuditEntry) { e.Params = map[string]any{"x": make(chan int)} },
	}
	for name, mutate := range invalid {
		e := valid
		mutate(&e)
		err := uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error { return tx.AppendAudit(ctx, e) })
		if err == nil {
			t.Fatalf("AppendAudit with %s succeeded", name)
		}
	}
	if got := listAudit(t, uow, lastID, 10); len(got) != 0 {
		t.Fatalf("invalid audit entries stored: %+v", got)
	}
}

// checkConcurrentAudit appends from several transactions at once: every
// entry is stored under its own id.
func checkConcurrentAudit(t *testing.T, uow ports.UnitOfWork, lastID int64) {
	t.Helper()
	const n = 6
	errs := make([]error, n)
	parallel(n, func(i int) {
		errs[i] = uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			return tx.AppendAudit(ctx, ports.AuditEntry{Actor: ports.UserActor(int64(i + 1)), Action: ports.AuditReconcile,
				Outcome: ports.AuditOK, Params: map[string]any{"i": i}})
		})
	})
	for _, err := range errs {
		noErr(t, "concurrent AppendAudit", err)
	}
	recs := listAudit(t, uow, lastID, 2*n)
	seen := map[float64]bool{}
	for i, r := range recs {
		if i > 0 && r.ID <= recs[i-1].ID {
			t.Fatalf("audit ids not increasing: %v", auditIDs(recs))
		}
		v, ok := r.Params["i"].(float64)
		if !ok {
			t.Fatalf("audit record %d params %#v, want a number i", r.ID, r.Params)
		}
		seen[v] = true
	}
	if len(recs) != n || len(seen) != n {
		t.Fatalf("%d audit records (%d distinct), want %d", len(recs), len(seen), n)
	}
}
