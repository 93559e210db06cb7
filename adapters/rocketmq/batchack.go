package rocketmq

import (
	"context"
	"fmt"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// ackBatch acknowledges views of consumer group with one AckMessage call
// per topic (the RocketMQ 5 protocol carries many entries per call; the
// v5.1.2 Go client sends one) and returns one error per view, nil when the
// proxy answered OK for its entry. A transport failure or timeout fails
// every entry of its call; the proxy answers each entry on its own
// (an expired receipt handle fails only that entry). Unlike the library's
// Ack, a non-OK status is an error, so it reaches mq_ack_failure_total.
// A failed acknowledgement is harmless to correctness: the message comes
// back after its invisible duration and the handler's inbox makes the
// second delivery a duplicate.
func (p *protoConn) ackBatch(ctx context.Context, group string, views []*rmq.MessageView) []error {
	errs := make([]error, len(views))
	byTopic := map[string][]int{}
	var order []string
	for i, mv := range views {
		t := mv.GetTopic()
		if _, ok := byTopic[t]; !ok {
			order = append(order, t)
		}
		byTopic[t] = append(byTopic[t], i)
	}
	ctx = p.sign(ctx)
	for _, topic := range order {
		idx := byTopic[topic]
		req := &v2.AckMessageRequest{Group: &v2.Resource{Name: group}, Topic: &v2.Resource{Name: topic},
			Entries: make([]*v2.AckMessageEntry, len(idx))}
		for k, i := range idx {
			req.Entries[k] = &v2.AckMessageEntry{MessageId: views[i].GetMessageId(), ReceiptHandle: views[i].GetReceiptHandle()}
		}
		res, err := p.client.AckMessage(ctx, req)
		if err != nil {
			for _, i := range idx {
				errs[i] = fmt.Errorf("ack %s (batch of %d): %w", views[i].GetMessageId(), len(idx), err)
			}
			continue
		}
		status := map[string]*v2.Status{} // receipt handle -> its entry's status
		for _, e := range res.GetEntries() {
			status[e.GetReceiptHandle()] = e.GetStatus()
		}
		for _, i := range idx {
			st, ok := status[views[i].GetReceiptHandle()]
			switch {
			case !ok && len(res.GetEntries()) == 0:
				st = res.GetStatus() // no entries: the call's status is every entry's
			case !ok:
				errs[i] = fmt.Errorf("ack %s: the proxy's answer has no entry for it", views[i].GetMessageId())
				continue
			}
			if err := statusErr(st); err != nil {
				errs[i] = fmt.Errorf("ack %s: %w", views[i].GetMessageId(), err)
			}
		}
	}
	return errs
}
