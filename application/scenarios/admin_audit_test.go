package scenarios_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// auditLog returns every committed admin audit record, oldest first.
func (h *harness) auditLog() []ports.AuditRecord {
	h.t.Helper()
	var recs []ports.AuditRecord
	if err := h.pg.InTx(h.ctx(), func(ctx context.Context, tx ports.Tx) error {
		var err error
		recs, err = tx.ListAudit(ctx, 0, 1000)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return recs
}

// wantAudit checks that the audit log holds exactly n records and that
// the last one has the given actor, action, target and outcome.
func (h *harness) wantAudit(n int, actor, action, target, outcome string) ports.AuditRecord {
	h.t.Helper()
	recs := h.auditLog()
	if len(recs) != n {
		h.t.Fatalf("%d audit records, want %d: %+v", len(recs), n, recs)
	}
	last := recs[n-1]
	if last.Actor != actor || last.Action != action || last.Target != target || last.Outcome != outcome {
		h.t.Fatalf("audit record %+v, want actor %s action %s target %q outcome %s", last, actor, action, target, outcome)
	}
	return last
}

// subMicrosecond is an activity whose times and durations are finer than
// PostgreSQL keeps: a payment timeout of 1.5µs and a reservation TTL of
// 1m0.0000005s.
func subMicrosecond(id int64) ports.Activity {
	return ports.Activity{ActivityID: id, SKUID: 1, Stock: 3,
		StartsAt: start.Add(-time.Minute + 700*time.Nanosecond), EndsAt: start.Add(time.Hour + 1500*time.Nanosecond),
		PaymentTimeout: 1500 * time.Nanosecond, ReservationTTL: time.Minute + 500*time.Nanosecond}
}

// A CreateActivity with sub-microsecond settings stores them truncated to
// microseconds, seeds Redis (the activity is sellable), and a repeated
// call with the same body succeeds without touching the stock; different
// settings are AlreadyExists. Each call is audited once under its actor.
func TestCreateActivitySubMicrosecondIsSellableAndIdempotent(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	actor := ports.UserActor(9)
	req := subMicrosecond(4)
	got, err := h.admin.CreateActivity(ctx, actor, req)
	if err != nil {
		t.Fatalf("create with sub-microsecond settings: %v", err)
	}
	want := ports.Activity{ActivityID: 4, SKUID: 1, Stock: 3,
		StartsAt: start.Add(-time.Minute), EndsAt: start.Add(time.Hour + time.Microsecond),
		PaymentTimeout: time.Microsecond, ReservationTTL: time.Minute, StockLanes: 1}
	if got != want {
		t.Fatalf("stored %+v, want %+v", got, want)
	}
	target := ports.ActivityTarget(4, 1)
	rec := h.wantAudit(1, actor, ports.AuditCreateActivity, target, ports.AuditCreated)
	if rec.Params["payment_timeout"] != "1µs" || rec.Params["stock"] != float64(3) {
		t.Fatalf("audited params %v", rec.Params)
	}
	h.measure()
	if _, err := h.placeOrder(1, 4, req1); err != nil {
		t.Fatalf("the new activity is not sellable: %v", err)
	}
	again, err := h.admin.CreateActivity(ctx, actor, req)
	if err != nil || again != want {
		t.Fatalf("repeated create = %+v, %v; want %+v", again, err, want)
	}
	h.wantAudit(2, actor, ports.AuditCreateActivity, target, ports.AuditUnchanged)
	inv, err := h.redis.Inventory(ctx, 4, 1)
	if err != nil || inv.Available != 2 {
		t.Fatalf("inventory after the repeat %+v, %v; want 2 available (not reseeded)", inv, err)
	}
	other := req
	other.Stock = 5
	if _, err := h.admin.CreateActivity(ctx, ports.UserActor(10), other); !errors.Is(err, ports.ErrAlreadyExists) {
		t.Fatalf("create with other settings: %v, want ErrAlreadyExists", err)
	}
	h.wantAudit(3, ports.UserActor(10), ports.AuditCreateActivity, target, ports.AuditAlreadyExists)
	split := req
	split.StockLanes = 3
	if _, err := h.admin.CreateActivity(ctx, ports.UserActor(10), split); !errors.Is(err, ports.ErrAlreadyExists) {
		t.Fatalf("create with other stock lanes: %v, want ErrAlreadyExists", err)
	}
	h.wantAudit(4, ports.UserActor(10), ports.AuditCreateActivity, target, ports.AuditAlreadyExists)
	if acts := h.activityRows(); len(acts) != 1 || acts[0] != want {
		t.Fatalf("activities %+v, want only %+v", acts, want)
	}
}

const req1 = "req-sub-us"

// A CreateActivity whose Redis seeding fails leaves nothing (no row, no
// audit, not sellable); so does one whose commit fails after seeding. A
// retry of the same call then succeeds and the activity is sellable.
func TestCreateActivityLeavesASellableActivityOrNothing(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	actor := ports.UserActor(2)
	req := subMicrosecond(6)
	h.redis.FailOn("SeedActivity", fmt.Errorf("%w: redis down", ports.ErrTransient))
	if _, err := h.admin.CreateActivity(ctx, actor, req); !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("create while Redis is down: %v", err)
	}
	h.redis.ClearFaults()
	if acts := h.activityRows(); len(acts) != 0 || len(h.auditLog()) != 0 {
		t.Fatalf("a failed create left activities %+v and audit %+v", acts, h.auditLog())
	}
	h.measure()
	if _, err := h.placeOrder(1, 6, req1); !errors.Is(err, ports.ErrActivityNotFound) {
		t.Fatalf("order on a failed create: %v, want ErrActivityNotFound", err)
	}

	h.store.FailNextCommit(fmt.Errorf("%w: connection lost", ports.ErrTransient))
	if _, err := h.admin.CreateActivity(ctx, actor, req); !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("create whose commit fails: %v", err)
	}
	if acts := h.activityRows(); len(acts) != 0 || len(h.auditLog()) != 0 {
		t.Fatalf("a failed commit left activities %+v and audit %+v", acts, h.auditLog())
	}
	if _, err := h.placeOrder(1, 6, "req-after-commit-failure"); !errors.Is(err, ports.ErrActivityNotFound) {
		t.Fatalf("order after a failed commit: %v, want ErrActivityNotFound", err)
	}

	if _, err := h.admin.CreateActivity(ctx, actor, req); err != nil {
		t.Fatalf("retry: %v", err)
	}
	h.wantAudit(1, actor, ports.AuditCreateActivity, ports.ActivityTarget(6, 1), ports.AuditCreated)
	h.measure()
	if _, err := h.placeOrder(1, 6, "req-after-retry"); err != nil {
		t.Fatalf("order after the retry: %v", err)
	}
}

// State-changing admin actions refuse an empty actor and change nothing.
func TestAdminActionsNeedAnActor(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, err := h.admin.CreateActivity(ctx, "", subMicrosecond(3)); !errors.Is(err, ports.ErrPermissionDenied) {
		t.Fatalf("create without actor: %v", err)
	}
	if _, err := h.admin.ReplayDeadLetter(ctx, "", 1, "why"); !errors.Is(err, ports.ErrPermissionDenied) {
		t.Fatalf("replay without actor: %v", err)
	}
	if _, err := h.reconciler.Reconcile(ctx, ""); !errors.Is(err, ports.ErrPermissionDenied) {
		t.Fatalf("reconcile without actor: %v", err)
	}
	if _, err := h.admin.RebuildProjection(ctx, "", h.projection); !errors.Is(err, ports.ErrPermissionDenied) {
		t.Fatalf("rebuild without actor: %v", err)
	}
	if acts := h.activityRows(); len(acts) != 0 || len(h.auditLog()) != 0 {
		t.Fatalf("refused calls left activities %+v and audit %+v", acts, h.auditLog())
	}
}

// poison stores a dead letter for a message of an unknown activity and
// returns its id.
func (h *harness) poison(activityID int64) int64 {
	h.t.Helper()
	m := message.OrderCreateRequested{Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeOrderCreateRequested,
		MessageID: "evt_a", MessageKey: "rsv_a", CreatedAt: start}, RequestID: "r", ReservationID: "rsv_a", OrderID: "ord_a",
		ActivityID: activityID, SKUID: 1, UserID: 1, Quantity: 1, ReservationCreatedAt: start, ReservationValidUntil: start.Add(time.Hour)}
	body, err := m.Encode()
	if err != nil {
		h.t.Fatal(err)
	}
	ds := h.create.HandleBatch(context.Background(), []ports.Delivery{{Body: body, DeliveryAttempt: 1,
		Properties: map[string]string{"message_id": "evt_a"}}})
	if !ds[0].Ack || ds[0].Reason != "UNKNOWN_ACTIVITY" {
		h.t.Fatalf("poison decision %+v", ds[0])
	}
	page, err := h.admin.ListDeadLetters(context.Background(), "", 10, "")
	if err != nil || len(page.DeadLetters) != 1 {
		h.t.Fatalf("dead letters %+v %v", page, err)
	}
	return page.DeadLetters[0].ID
}

// Every replay writes exactly one audit row with its actor and outcome:
// REFUSED, FAILED (the publish failed), REPLAYED, SKIPPED_ALREADY_APPLIED
// and NOT_FOUND for an unknown id (which used to write nothing). Reading
// the dead letters writes none.
func TestReplayAuditsEveryOutcome(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := h.poison(11)
	target := ports.DeadLetterTarget(id)
	if len(h.auditLog()) != 0 {
		t.Fatalf("listing dead letters was audited: %+v", h.auditLog())
	}
	if _, err := h.admin.ReplayDeadLetter(ctx, "user:5", id, "early"); !errors.Is(err, ports.ErrReplayRefused) {
		t.Fatalf("replay before the fix: %v", err)
	}
	rec := h.wantAudit(1, "user:5", ports.AuditDLQReplay, target, "REFUSED")
	if rec.Params["reason"] != "early" || rec.Params["detail"] != "activity still unknown" {
		t.Fatalf("refused replay params %v", rec.Params)
	}

	h.activity(11, 3, time.Minute, time.Hour)
	h.broker.SetMode(ports.TopicOrderCreate, memory.SendReject)
	if _, err := h.admin.ReplayDeadLetter(ctx, "user:5", id, "fixed"); !errors.Is(err, ports.ErrSendRejected) {
		t.Fatalf("replay while the broker rejects: %v", err)
	}
	creates := 1 // the activity's CREATE_ACTIVITY row
	h.wantAudit(2+creates, "user:5", ports.AuditDLQReplay, target, "FAILED")

	h.broker.SetMode(ports.TopicOrderCreate, memory.SendConfirm)
	r, err := h.admin.ReplayDeadLetter(ctx, "user:6", id, "fixed, broker back")
	if err != nil || r.Outcome != "REPLAYED" {
		t.Fatalf("replay: %+v %v", r, err)
	}
	rec = h.wantAudit(3+creates, "user:6", ports.AuditDLQReplay, target, "REPLAYED")
	if rec.Params["replay_id"] != r.ReplayID || rec.Params["replay_count"] != float64(1) {
		t.Fatalf("replayed params %v, want replay %s count 1", rec.Params, r.ReplayID)
	}

	h.settle()
	if r, err := h.admin.ReplayDeadLetter(ctx, "user:6", id, "again"); err != nil || r.Outcome != "SKIPPED_ALREADY_APPLIED" {
		t.Fatalf("second replay: %+v %v", r, err)
	}
	h.wantAudit(4+creates, "user:6", ports.AuditDLQReplay, target, "SKIPPED_ALREADY_APPLIED")

	unknown := id + 1000
	if _, err := h.admin.ReplayDeadLetter(ctx, "user:7", unknown, "typo"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("replay of an unknown id: %v, want ErrNotFound", err)
	}
	rec = h.wantAudit(5+creates, "user:7", ports.AuditDLQReplay, ports.DeadLetterTarget(unknown), ports.AuditNotFound)
	if rec.Params["reason"] != "typo" {
		t.Fatalf("not-found params %v", rec.Params)
	}
	if _, err := h.admin.ListDeadLetters(ctx, "", 10, ""); err != nil {
		t.Fatal(err)
	}
	if n := len(h.auditLog()); n != 5+creates {
		t.Fatalf("%d audit rows after a list, want %d", n, 5+creates)
	}
}

// Each reconciliation pass writes exactly one RECONCILE row under its
// actor with the pass's summary; a failed pass writes one FAILED row with
// the error. A stock report (read only) writes none.
func TestReconcileAuditsEachPass(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.activity(1, 5, time.Minute, 5*time.Second)
	if _, err := h.admin.GetStockReport(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	h.wantAudit(1, ports.UserActor(1), ports.AuditCreateActivity, ports.ActivityTarget(1, 1), ports.AuditCreated)

	if _, err := h.reconciler.Reconcile(ctx, "user:3"); err != nil {
		t.Fatal(err)
	}
	rec := h.wantAudit(2, "user:3", ports.AuditReconcile, "", ports.AuditOK)
	if rec.Params["skus_checked"] != float64(1) || rec.Params["skus_drifting"] != float64(0) ||
		rec.Params["examined"] != float64(0) || rec.Params["error"] != nil {
		t.Fatalf("pass params %v", rec.Params)
	}

	h.redis.FailOn("Inventory", errors.New("redis blip"))
	if _, err := h.reconciler.Reconcile(ctx, ports.ActorReconciler); err == nil {
		t.Fatal("a pass whose drift step fails succeeded")
	}
	h.redis.ClearFaults()
	rec = h.wantAudit(3, ports.ActorReconciler, ports.AuditReconcile, "", ports.AuditFailed)
	if msg, _ := rec.Params["error"].(string); msg == "" {
		t.Fatalf("failed pass params %v, want the error", rec.Params)
	}
}

// The periodic reconciler audits each of its passes under the actor it
// runs as.
func TestPeriodicReconcilerAuditsUnderItsActor(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.reconciler.Run(ctx, ports.ActorReconciler, time.Millisecond) }()
	for len(h.auditLog()) == 0 {
		select {
		case err := <-done:
			t.Fatalf("reconciler stopped before its first pass: %v", err)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs := h.auditLog()
	for _, r := range recs {
		if r.Actor != ports.ActorReconciler || r.Action != ports.AuditReconcile {
			t.Fatalf("periodic pass audited as %+v", r)
		}
	}
	// The first pass ended before the cancel; a later one may have been
	// cut short by it (FAILED, with the context's error).
	if recs[0].Outcome != ports.AuditOK {
		t.Fatalf("first periodic pass audited as %+v", recs[0])
	}
}

// A projection rebuild writes one PROJECTION_REBUILD row with the number
// of views; a failed one writes one FAILED row with the error.
func TestProjectionRebuildIsAudited(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.activity(1, 5, time.Minute, time.Minute)
	if _, err := h.placeOrder(3, 1, req(1)); err != nil {
		t.Fatal(err)
	}
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	n, err := h.admin.RebuildProjection(ctx, "user:4", h.projection)
	if err != nil || n != 1 {
		t.Fatalf("rebuild = %d, %v", n, err)
	}
	rec := h.wantAudit(2, "user:4", ports.AuditProjectionRebuild, "", ports.AuditOK)
	if rec.Params["views"] != float64(1) {
		t.Fatalf("rebuild params %v", rec.Params)
	}
	h.redis.FailOn("ViewApply", errors.New("redis blip"))
	if _, err := h.admin.RebuildProjection(ctx, "user:4", h.projection); err == nil {
		t.Fatal("a failing rebuild succeeded")
	}
	h.redis.ClearFaults()
	rec = h.wantAudit(3, "user:4", ports.AuditProjectionRebuild, "", ports.AuditFailed)
	if msg, _ := rec.Params["error"].(string); msg == "" || rec.Params["views"] != float64(0) {
		t.Fatalf("failed rebuild params %v", rec.Params)
	}
}
