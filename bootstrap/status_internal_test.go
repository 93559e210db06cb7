package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// scriptedMessaging answers MessagingSnapshot with its replies in turn.
type scriptedMessaging struct {
	replies []messagingReply
}

type messagingReply struct {
	snap ports.MessagingSnapshot
	err  error
}

func (s *scriptedMessaging) MessagingSnapshot(context.Context) (ports.MessagingSnapshot, error) {
	r := s.replies[0]
	s.replies = s.replies[1:]
	return r.snap, r.err
}

// TestStatusKeepsTheLastMessagingFigures checks that a messaging read that
// times out with nothing read is answered with the last full read, its
// error saying how old it is, and that nothing is invented before the
// first full read.
func TestStatusKeepsTheLastMessagingFigures(t *testing.T) {
	timedOut := fmt.Errorf("gather metrics: %w", context.DeadlineExceeded)
	full := ports.MessagingSnapshot{Groups: []ports.GroupFigures{{Group: "CG_A"}}}
	src := &scriptedMessaging{replies: []messagingReply{
		{err: timedOut}, {snap: full}, {err: timedOut}, {snap: ports.MessagingSnapshot{}}, {err: timedOut},
	}}
	p := &StatusPage{messaging: src}
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

	snap, err := p.messagingSnapshot(context.Background(), t0)
	if !errors.Is(err, context.DeadlineExceeded) || len(snap.Groups) != 0 {
		t.Fatalf("before any full read: %+v, %v; want nothing and the timeout", snap, err)
	}
	if _, err := p.messagingSnapshot(context.Background(), t0.Add(time.Second)); err != nil {
		t.Fatalf("full read: %v", err)
	}
	snap, err = p.messagingSnapshot(context.Background(), t0.Add(2500*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "read 1.5s ago") {
		t.Errorf("after a timeout: error %v, want the timeout and the figures' age 1.5s", err)
	}
	if len(snap.Groups) != 1 || snap.Groups[0].Group != "CG_A" {
		t.Errorf("after a timeout: groups %+v, want the last full read's", snap.Groups)
	}
	// A full read with no group replaces the kept one: what the broker
	// reports now wins over what it reported before.
	if _, err := p.messagingSnapshot(context.Background(), t0.Add(3*time.Second)); err != nil {
		t.Fatalf("empty full read: %v", err)
	}
	snap, _ = p.messagingSnapshot(context.Background(), t0.Add(4*time.Second))
	if len(snap.Groups) != 0 {
		t.Errorf("after an empty full read and a timeout: groups %+v, want none", snap.Groups)
	}
}
