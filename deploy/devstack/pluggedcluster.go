package devstack

import (
	"fmt"
	"path/filepath"

	"github.com/seckill-dev/seckill/adapters/brokers"
)

// PluggedClusterDir is <state>/<broker>-cluster, the state dir of the
// cluster mode of the broker plug named broker.
func (c Config) PluggedClusterDir(broker string) string {
	return filepath.Join(c.StateDir, broker+"-cluster")
}

// PluggedClusterStack returns the cluster mode of the broker plug named
// broker (brokerplug.Plug.DevCluster), started on request (`seckill-stack
// up --broker-cluster NAME`): a stack of its own in
// PluggedClusterDir(broker), beside the default stack and sharing nothing
// with it but the download cache. Its exports are the broker's variables
// pointing at the cluster (ClusterOverrides puts them over the default
// stack's). It fails when the plug describes no cluster mode.
func PluggedClusterStack(cfg Config, log *Logger, broker string) (*Stack, error) {
	plug, err := brokers.Lookup(broker)
	if err != nil {
		return nil, fmt.Errorf("broker cluster: %w", err)
	}
	specs := plug.DevCluster()
	if len(specs) == 0 {
		return nil, fmt.Errorf("broker cluster: the %s plug describes no cluster mode", broker)
	}
	cc := cfg
	cc.StateDir = cfg.PluggedClusterDir(broker)
	cc.StackBrokers = []string{broker}
	var comps []Component
	for _, spec := range specs {
		comps = append(comps, NewPlugged(cc, log, broker, spec))
	}
	return New(cc, log, comps, nil)
}

// ClusterExports are the exports of the cluster mode's components (the
// broker's variables), without the stack-wide ones.
func (s *Stack) ClusterExports() []Export { return componentExports(s.components) }

// OverrideExports returns base with each variable of over replacing the
// one of the same name, and the variables base lacks appended.
func OverrideExports(base, over []Export) []Export {
	out := append([]Export(nil), base...)
	for _, o := range over {
		replaced := false
		for i := range out {
			if out[i].Name == o.Name {
				out[i], replaced = o, true
			}
		}
		if !replaced {
			out = append(out, o)
		}
	}
	return out
}
