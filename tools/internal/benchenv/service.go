package benchenv

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// ServiceName is the file name of the service binary (bootstrap/cmd/seckill).
const ServiceName = "seckill"

// ServiceBinary returns the service binary that sale and chaos start as
// `seckill serve`: the seckill executable in the directory of this one
// (bin/seckill beside bin/seckill-bench, as make build-bench leaves them).
// Without it the error says how to build it.
func ServiceBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the seckill-bench executable: %w", err)
	}
	dir := filepath.Dir(exe)
	p := filepath.Join(dir, ServiceName)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("no service binary %s beside %s: build it there (make build-bench, or go build -o %s/ ./bootstrap/cmd/seckill)",
			p, exe, dir)
	}
	return p, nil
}

// LoadConfig reads the SECKILL_* environment as the service does and fills
// in the instance id. The per-client-address limit is off: the load
// generator is one address sending thousands of calls a second.
func LoadConfig() (config.Config, *slog.Logger, error) {
	cfg, err := config.Load(os.LookupEnv)
	if err != nil {
		return config.Config{}, nil, err
	}
	cfg.API.ClientRate, cfg.API.ClientBurst = 0, 0
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		cfg.InstanceID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return cfg, bootstrap.LoggerFor(cfg), nil
}

// StartInProcess runs app (a service built in this process) until stop is
// called and returns its API's base URL; stop waits for the service to end
// and reports an error it stopped with on stderr, naming the bench.
func StartInProcess(ctx context.Context, app *bootstrap.App, bench string) (base string, stop func(), err error) {
	runCtx, cancel := context.WithCancel(ctx)
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- app.Run(runCtx, func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		return "http://" + a.String(), func() {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintf(os.Stderr, "seckill-bench %s: the in-process service stopped with: %v\n", bench, err)
			}
		}, nil
	case err := <-done:
		cancel()
		return "", nil, err
	}
}

// KeepWorkers keeps only the named workers of app.
func KeepWorkers(app *bootstrap.App, names ...string) {
	var keep []bootstrap.Worker
	for _, w := range app.Workers {
		if slices.Contains(names, w.Name) {
			keep = append(keep, w)
		}
	}
	app.Workers = keep
}
