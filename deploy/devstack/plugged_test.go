package devstack

import (
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
)

// TestBrokerSelection: SECKILL_STACK_BROKERS names brokers (or all of
// them) and SECKILL_BROKER adds its own; RabbitMQ's older switch still
// works.
func TestBrokerSelection(t *testing.T) {
	cases := []struct {
		env                map[string]string
		kafka, rabbit, xyz bool
	}{
		{map[string]string{}, false, false, false},
		{map[string]string{"SECKILL_STACK_BROKERS": "all"}, true, true, true},
		{map[string]string{"SECKILL_STACK_BROKERS": " kafka ,xyz"}, true, false, true},
		{map[string]string{"SECKILL_BROKER": "kafka"}, true, false, false},
		{map[string]string{"SECKILL_STACK_RABBITMQ": "1"}, false, true, false},
	}
	for _, c := range cases {
		c.env["HOME"] = "/home/u"
		cfg, err := ConfigFromEnv(env(c.env), "/repo")
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.BrokerSelected("kafka"); got != c.kafka {
			t.Errorf("%v: kafka selected %v, want %v", c.env, got, c.kafka)
		}
		if got := cfg.RabbitMQ.Selected; got != c.rabbit {
			t.Errorf("%v: rabbitmq selected %v, want %v", c.env, got, c.rabbit)
		}
		if got := cfg.BrokerSelected("xyz"); got != c.xyz {
			t.Errorf("%v: xyz selected %v, want %v", c.env, got, c.xyz)
		}
	}
}

// TestPluggedProcessSpec: the directory placeholder becomes the
// component's directory, the plug's variables are exported, and an
// artifact that is not groupId:artifactId:version is refused before mvn
// runs.
func TestPluggedProcessSpec(t *testing.T) {
	cfg, err := ConfigFromEnv(env(map[string]string{"HOME": "/home/u", "SECKILL_STACK_BROKERS": "x"}), "/repo")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPlugged(cfg, NewLogger(&strings.Builder{}, true), "x", brokerplug.DevProcess{
		Name: "x-node", Main: "x.Main", Ports: []int{1, 2}, Env: []string{"SECKILL_X=127.0.0.1:1"},
	})
	if got, want := p.expand(brokerplug.DirPlaceholder+"/a.conf"), cfg.StateDir+"/x-node/a.conf"; got != want {
		t.Errorf("expand = %q, want %q", got, want)
	}
	if e := p.Exports(); len(e) != 1 || e[0] != (Export{"SECKILL_X", "127.0.0.1:1"}) {
		t.Errorf("Exports = %v", e)
	}
	if !p.Selected() || p.Group() != "x" || p.ports() != "1,2" {
		t.Errorf("selected %v, group %q, ports %q", p.Selected(), p.Group(), p.ports())
	}
	pom, err := resolutionPOM("x", []string{"g:a:1", "h:b:2"})
	if err != nil || !strings.Contains(pom, "<groupId>h</groupId><artifactId>b</artifactId><version>2</version>") {
		t.Errorf("pom: %v\n%s", err, pom)
	}
	for _, bad := range []string{"g:a", "g::1", "g:a:1:x"} {
		if _, err := resolutionPOM("x", []string{bad}); err == nil {
			t.Errorf("artifact %q accepted", bad)
		}
	}
}
