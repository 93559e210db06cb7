// Package brokers is the registry of the broker plugs: the one list that
// names every broker adapter. The service's configuration, its
// composition, the end-to-end tests and the dependency rule loop over it;
// adding a broker is one line here (see docs/architecture.md, "Adding a
// broker").
package brokers

import (
	"fmt"
	"strings"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/kafka"
	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/rocketmq"
)

// All returns every broker plug; the first is the default broker.
func All() []brokerplug.Plug {
	return []brokerplug.Plug{rocketmq.Plug{}, rabbitmq.Plug{}, kafka.Plug{}}
}

// Default returns the name of the broker chosen when SECKILL_BROKER is
// unset.
func Default() string { return All()[0].Name() }

// Names returns the plugs' names in registry order.
func Names() []string {
	plugs := All()
	names := make([]string, len(plugs))
	for i, p := range plugs {
		names[i] = p.Name()
	}
	return names
}

// Lookup returns the plug named name, or an error listing the names there
// are.
func Lookup(name string) (brokerplug.Plug, error) {
	for _, p := range All() {
		if p.Name() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no broker %q (there are: %s)", name, strings.Join(Names(), ", "))
}
