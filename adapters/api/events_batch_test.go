package api_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/api"
	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/application"
)

// TestEventStreamCutsStalledSubscriberOnThePagePath: through the
// service's own subscriptions (application.EventSubscriptions, which hand
// the stream a page of events at once: ports.EventBatchSink), a
// subscriber that stops reading is cut off within the send bound like on
// the single-event path: its place among the streams frees, and reading
// on it finds the events in flight, then an error, never the whole log.
// (No reading subscriber here: with the 50 ms bound a loaded machine may
// cut one too; the page path's order is covered end to end by
// TestEventSubscriptionMidSale.)
func TestEventStreamCutsStalledSubscriberOnThePagePath(t *testing.T) {
	limits := api.DefaultLimits()
	limits.EventStreams = 1
	limits.EventSendTimeout = 50 * time.Millisecond
	auth, err := api.NewAuthenticator(secret)
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	log := memory.NewEventLog(50 * time.Millisecond)
	subs := application.NewEventSubscriptions(log, nil, nil, discard, application.SubscriptionConfig{Page: 100})
	h, err := api.NewHandler(&fakeOrders{}, &fakeAdmin{}, subs, auth, discard, limits, nil, api.Observability{})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveLimited(t, h, api.DefaultServerLimits())
	stalledSubscriberIsCut(t, "http://"+addr, log.Append)
}
