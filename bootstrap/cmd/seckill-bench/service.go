package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// serviceName is the file name of the service binary (bootstrap/cmd/seckill).
const serviceName = "seckill"

// serviceBinary returns the service binary that sale and chaos start as
// `seckill serve`: the seckill executable in the directory of this one
// (bin/seckill beside bin/seckill-bench, as make build-bench leaves them).
// Without it the error says how to build it.
func serviceBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the seckill-bench executable: %w", err)
	}
	dir := filepath.Dir(exe)
	p := filepath.Join(dir, serviceName)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("no service binary %s beside %s: build it there (make build-bench, or go build -o %s/ ./bootstrap/cmd/seckill)",
			p, exe, dir)
	}
	return p, nil
}

// loadConfig reads the SECKILL_* environment as the service does and fills
// in the instance id. The per-client-address limit is off: the load
// generator is one address sending thousands of calls a second.
func loadConfig() (config.Config, *slog.Logger, error) {
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
