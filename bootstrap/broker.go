package bootstrap

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// Broker is the messaging adapter as the composition uses it: the one seam
// a broker adapter plugs into (brokerplug.Broker; SECKILL_BROKER chooses
// the plug from adapters/brokers). The use cases see only the ports.
type Broker interface{ brokerplug.Broker }

// provideBroker opens the broker whose plug cfg.Broker names and returns
// its cleanup.
func provideBroker(cfg config.Config, tr Tracer, reg prometheus.Registerer, log *slog.Logger) (Broker, func(), error) {
	plug, err := brokers.Lookup(cfg.Broker.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("SECKILL_BROKER: %w", err)
	}
	b, err := plug.Open(cfg.Broker.Settings, brokerplug.Deps{Neutral: cfg.Broker.Neutral, Tracer: tr.TracerProvider,
		Registerer: reg, Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("broker %s: %w", plug.Name(), err)
	}
	return b, func() { _ = b.Close() }, nil
}
