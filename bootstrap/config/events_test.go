package config

import (
	"strings"
	"testing"
	"time"
)

// The event log's variables: their defaults, a value from the
// environment, and every out-of-range value reported by name.
func TestEventsVariables(t *testing.T) {
	c, err := Load(env(localStack))
	if err != nil {
		t.Fatal(err)
	}
	want := Events{SequenceInterval: 20 * time.Millisecond, SequenceBatch: 500, PollInterval: 200 * time.Millisecond,
		CheckpointInterval: 5 * time.Second, MaxStreams: 64, SendTimeout: 30 * time.Second, Window: 10000}
	if c.Events != want {
		t.Fatalf("defaults %+v, want %+v", c.Events, want)
	}
	c, err = Load(env(with(localStack, "SECKILL_EVENT_SEQUENCE_INTERVAL", "5ms", "SECKILL_EVENT_STREAMS", "3",
		"SECKILL_EVENT_WINDOW", "0")))
	if err != nil || c.Events.SequenceInterval != 5*time.Millisecond || c.Events.MaxStreams != 3 || c.Events.Window != 0 {
		t.Fatalf("from the environment: %+v, %v", c.Events, err)
	}
	for key, bad := range map[string]string{
		"SECKILL_EVENT_SEQUENCE_INTERVAL":   "0s",
		"SECKILL_EVENT_SEQUENCE_BATCH":      "0",
		"SECKILL_EVENT_POLL_INTERVAL":       "0s",
		"SECKILL_EVENT_CHECKPOINT_INTERVAL": "-1s",
		"SECKILL_EVENT_STREAMS":             "0",
		"SECKILL_EVENT_SEND_TIMEOUT":        "10ms",
		"SECKILL_EVENT_WINDOW":              "-1",
	} {
		if _, err := Load(env(with(localStack, key, bad))); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: %v, want an error naming it", key, bad, err)
		}
	}
}
