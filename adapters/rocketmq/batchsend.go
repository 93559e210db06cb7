package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// batchSender group-commits the sends of plain messages (no message group,
// no delivery time) of one topic: concurrent Publish calls are queued and
// each sender goroutine takes what is queued, up to max, into one
// SendMessage call of the RocketMQ 5 gRPC protocol, which the v5.1.2 Go
// client does not expose (it sends one message per call). The proxy stores
// the call's messages as one batch and answers with one status for all of
// them (docs/local-stack.md, correction 22): OK confirms every message; a
// transport failure, a timeout or any other status of a batch of more than
// one message makes every message of it UNKNOWN (never a definite failure:
// the scanner resends with the same message ids); a batch of one keeps the
// single-send classification. There is no linger: a lone message goes out
// at once, batches form only while earlier calls are in flight.
//
// It sends through a protoConn of its own. Safe for concurrent use; Close
// stops its goroutines.
type batchSender struct {
	*protoConn
	max   int
	sizes prometheus.Observer // mq_send_batch_messages

	mu     sync.Mutex
	queues map[string]chan *batchItem
	stop   chan struct{}
	wg     sync.WaitGroup
}

// batchItem is one queued message and where its result goes.
type batchItem struct {
	msg      *v2.Message
	deadline time.Time
	done     chan error // buffered 1
}

// batchSenders is how many calls per topic may be in flight at once.
const batchSenders = 4

func newBatchSender(cfg Config, max int, sizes prometheus.Observer) (*batchSender, error) {
	pc, err := dialProto(cfg, "batch")
	if err != nil {
		return nil, err
	}
	return &batchSender{protoConn: pc, max: max, sizes: sizes,
		queues: map[string]chan *batchItem{}, stop: make(chan struct{})}, nil
}

// eligible reports whether msg can go in a batch.
func (b *batchSender) eligible(msg ports.OutboundMessage) bool {
	return b != nil && msg.MessageGroup == "" && msg.DeliverAt.IsZero()
}

// send queues msg for topic and waits for its batch's result or ctx. It
// returns the message's broker id (the one consumers see) and nil for
// CONFIRMED; errors classify as for the library's send.
func (b *batchSender) send(ctx context.Context, topic string, msg ports.OutboundMessage) (string, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(b.cfg.SendTimeout)
	}
	pm := b.protoMessage(topic, msg)
	it := &batchItem{msg: pm, deadline: deadline, done: make(chan error, 1)}
	q, err := b.queue(topic)
	if err != nil {
		return "", err
	}
	select {
	case q <- it:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	select {
	case err := <-it.done:
		return pm.GetSystemProperties().GetMessageId(), err
	case <-ctx.Done():
		return "", ctx.Err() // queued or in flight: the outcome is unknown
	}
}

// queue returns the topic's queue, starting its senders on first use.
func (b *batchSender) queue(topic string) (chan *batchItem, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stop:
		return nil, errors.New("batch sender closed")
	default:
	}
	q, ok := b.queues[topic]
	if !ok {
		q = make(chan *batchItem, b.max*batchSenders)
		b.queues[topic] = q
		for range batchSenders {
			b.wg.Add(1)
			go b.run(q)
		}
	}
	return q, nil
}

// run sends what q holds, up to max per call, until Close.
func (b *batchSender) run(q chan *batchItem) {
	defer b.wg.Done()
	batch := make([]*batchItem, 0, b.max)
	for {
		batch = batch[:0]
		select {
		case it := <-q:
			batch = append(batch, it)
		case <-b.stop:
			return
		}
	fill:
		for len(batch) < b.max {
			select {
			case it := <-q:
				batch = append(batch, it)
			default:
				break fill
			}
		}
		b.flush(batch)
	}
}

// flush sends one batch, bounded by the earliest deadline of its messages,
// and hands every message its result.
func (b *batchSender) flush(batch []*batchItem) {
	// A message whose caller's deadline passed while it was queued is not
	// sent (its caller already answered UNKNOWN): it must not cut the
	// others' time short.
	now := time.Now()
	live := batch[:0]
	for _, it := range batch {
		if !it.deadline.After(now) {
			it.done <- context.DeadlineExceeded
			continue
		}
		live = append(live, it)
	}
	batch = live
	if len(batch) == 0 {
		return
	}
	deadline := batch[0].deadline
	msgs := make([]*v2.Message, len(batch))
	for i, it := range batch {
		msgs[i] = it.msg
		if it.deadline.Before(deadline) {
			deadline = it.deadline
		}
	}
	ctx, cancel := context.WithDeadline(b.sign(context.Background()), deadline)
	defer cancel()
	if b.sizes != nil {
		b.sizes.Observe(float64(len(batch)))
	}
	res, err := b.client.SendMessage(ctx, &v2.SendMessageRequest{Messages: msgs})
	if err == nil {
		err = statusErr(res.GetStatus())
		if err == nil && len(res.GetEntries()) > 0 {
			err = statusErr(res.GetEntries()[0].GetStatus())
		}
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if err != nil && len(batch) > 1 {
		if outcome, _ := classifySend(err); outcome == OutcomeDefiniteFailure {
			// One status for a whole batch says nothing certain about each
			// message: keep the rule that only a single send can fail
			// definitely.
			err = fmt.Errorf("batch of %d refused as a whole, outcome of each message unknown: %s", len(batch), err)
		}
	}
	for _, it := range batch {
		it.done <- err
	}
}

// statusErr maps a proxy status to the library's error type (nil for OK),
// so classifySend applies unchanged.
func statusErr(st *v2.Status) error {
	if st == nil || st.GetCode() == v2.Code_OK {
		return nil
	}
	return &rmq.ErrRpcStatus{Code: int32(st.GetCode()), Message: st.GetMessage()}
}

// protoMessage builds the protocol message of msg for topic, as the client
// library does for a plain message.
func (b *batchSender) protoMessage(topic string, msg ports.OutboundMessage) *v2.Message {
	props := make(map[string]string, len(msg.Properties)+1)
	for k, v := range msg.Properties {
		props[k] = v
	}
	props[message.PropMessageID] = msg.MessageID
	sys := &v2.SystemProperties{
		Keys:          msg.Keys,
		MessageId:     rmq.GetMessageIdCodecInstance().NextMessageId().String(),
		BornTimestamp: timestamppb.Now(),
		BornHost:      b.host,
		BodyEncoding:  v2.Encoding_IDENTITY,
		MessageType:   v2.MessageType_NORMAL,
	}
	if msg.Tag != "" {
		tag := msg.Tag
		sys.Tag = &tag
	}
	return &v2.Message{Topic: &v2.Resource{Name: topic}, SystemProperties: sys, UserProperties: props, Body: msg.Body}
}

// Close stops the senders (queued messages are answered by their callers'
// deadlines) and closes the connection.
func (b *batchSender) Close() error {
	b.mu.Lock()
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	b.mu.Unlock()
	b.wg.Wait()
	return b.protoConn.Close()
}
