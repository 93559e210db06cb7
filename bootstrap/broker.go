package bootstrap

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/brokerkit"
	"github.com/seckill-dev/seckill/adapters/brokerplug"
	"github.com/seckill-dev/seckill/adapters/brokers"
	"github.com/seckill-dev/seckill/bootstrap/config"
	"github.com/seckill-dev/seckill/ports"
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

// provideMessagingStatus is the broker's state as the status page reads
// it: every broker adapter exports it in the process's registry under the
// same names (brokerkit.RegistryStatus).
func provideMessagingStatus(reg *prometheus.Registry) ports.MessagingStatus {
	return brokerkit.NewRegistryStatus(reg)
}
