package rabbitmq

// ErrChannelReset is errChannelReset, for the tests of the outcome
// classification.
var ErrChannelReset = errChannelReset

// PendingConfirms returns how many written publishes of p wait for their
// confirmation, over all its confirm channels.
func PendingConfirms(p *Publisher) int {
	p.mu.RLock()
	chans := p.chans
	p.mu.RUnlock()
	n := 0
	for _, c := range chans {
		c.mu.Lock()
		n += len(c.pending)
		c.mu.Unlock()
	}
	return n
}
