package scenarios_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/seckill-dev/seckill/ports"
)

// faultyStore is the PostgreSQL store with the faults a scenario injects at
// its boundary: the use cases see the failure the store would report, and
// nothing of a failed call or transaction reaches the database. Safe for
// concurrent use.
type faultyStore struct {
	ports.UnitOfWork

	mu          sync.Mutex
	getActivity error // every GetActivity fails with it while set
	claimInbox  error // the next ClaimInbox fails with it, before its statement
	commit      error // the next transaction whose callback succeeds fails with it, rolled back
}

// FailGetActivity makes every GetActivity fail with err (nil clears it): the
// database is down for activity lookups.
func (s *faultyStore) FailGetActivity(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.getActivity = err
}

// FailNextClaimInbox makes the next ClaimInbox fail with err before it runs.
func (s *faultyStore) FailNextClaimInbox(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimInbox = err
}

// FailNextCommit makes the next transaction whose callback returns nil fail
// with err instead of committing: it is rolled back, as PostgreSQL does with
// a transaction whose COMMIT fails, and InTx returns err.
func (s *faultyStore) FailNextCommit(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commit = err
}

// take returns the armed fault in *slot, clearing it when once is set.
func (s *faultyStore) take(slot *error, once bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := *slot
	if once {
		*slot = nil
	}
	return err
}

// InTx implements ports.UnitOfWork on the PostgreSQL store.
func (s *faultyStore) InTx(ctx context.Context, fn func(ctx context.Context, tx ports.Tx) error) error {
	return s.UnitOfWork.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		if err := fn(ctx, faultyTx{Tx: tx, s: s}); err != nil {
			return err
		}
		if err := s.take(&s.commit, true); err != nil {
			return fmt.Errorf("commit (injected fault): %w", err)
		}
		return nil
	})
}

// faultyTx is a PostgreSQL transaction whose faulty methods fail while a
// fault is armed.
type faultyTx struct {
	ports.Tx
	s *faultyStore
}

func (t faultyTx) GetActivity(ctx context.Context, activityID, skuID int64) (ports.Activity, error) {
	if err := t.s.take(&t.s.getActivity, false); err != nil {
		return ports.Activity{}, fmt.Errorf("get activity (injected fault): %w", err)
	}
	return t.Tx.GetActivity(ctx, activityID, skuID)
}

func (t faultyTx) ClaimInbox(ctx context.Context, group string, entries []ports.InboxEntry) ([]string, error) {
	if err := t.s.take(&t.s.claimInbox, true); err != nil {
		return nil, fmt.Errorf("claim inbox (injected fault): %w", err)
	}
	return t.Tx.ClaimInbox(ctx, group, entries)
}
