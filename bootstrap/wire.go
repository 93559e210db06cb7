//go:build wireinject

package bootstrap

import (
	"context"
	"log/slog"

	"github.com/google/wire"

	"github.com/seckill-dev/seckill/bootstrap/config"
)

// NewApp assembles the service from cfg. The returned cleanup closes every
// adapter in reverse order of construction.
func NewApp(ctx context.Context, cfg config.Config, log *slog.Logger) (*App, func(), error) {
	wire.Build(InfraSet, AppSet, provideStatusPage)
	return nil, nil, nil
}
