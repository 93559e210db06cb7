package bootstrap_test

import (
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/brokers"
)

const module = "github.com/seckill-dev/seckill"

// TestDependencyRule enforces the layering of docs/architecture.md on the
// non-test code of every package: domain imports only the standard
// library; ports only domain; application only domain, ports and its own packages; an
// adapter never imports application, bootstrap or another adapter but the
// shared broker packages (brokerkit, brokerplug; the registry adapters/brokers
// imports the broker adapters its plugs name) (test
// kits under adapters/testkit are for tests only); the consumer kit
// (adapters/projector), which outside modules import, uses only the
// published API (proto/gen); an example under examples/ is outside code:
// it imports only the consumer kit, the published API and examples; the
// tools under tools/ stand beside the composition root: they may import
// any package, and only a tool imports theirs; the composition root
// (bootstrap) names no broker adapter: it loops over the registry
// (adapters/brokers).
func TestDependencyRule(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, imp := range pkg.Imports {
			if msg := violation(rel, imp); msg != "" {
				t.Errorf("%s imports %s: %s", rel, imp, msg)
			}
		}
		checked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d packages checked; the walk is broken", checked)
	}
}

func violation(pkg, imp string) string {
	internal := strings.HasPrefix(imp, module+"/")
	std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
	local := strings.TrimPrefix(imp, module+"/")
	layer := strings.SplitN(pkg, "/", 2)[0]
	if internal && strings.HasPrefix(local, "tools/") && layer != "tools" {
		return "the tools stand beside the service: only a tool imports a tool's package"
	}
	if internal && layer == "bootstrap" && strings.HasPrefix(local, "adapters/") &&
		slices.Contains(brokers.Names(), strings.SplitN(strings.TrimPrefix(local, "adapters/"), "/", 2)[0]) {
		return "the composition root reaches the broker adapters through their registry (adapters/brokers) only"
	}
	switch layer {
	case "domain":
		if !std && !(internal && strings.HasPrefix(local, "domain/")) {
			return "domain may import only the standard library and domain"
		}
	case "ports":
		if !std && !(internal && strings.HasPrefix(local, "domain/")) {
			return "ports may import only the standard library and domain"
		}
	case "application":
		if !std && !(internal && (strings.HasPrefix(local, "domain/") || local == "ports" || strings.HasPrefix(local, "application/"))) {
			return "application may import only the standard library, domain, ports and its own packages"
		}
	case "examples":
		if internal && !strings.HasPrefix(local, "examples/") && !strings.HasPrefix(local, "adapters/projector") &&
			!strings.HasPrefix(local, "proto/gen/") {
			return "an example is outside code: it may import only the consumer kit (adapters/projector), the published API (proto/gen) and examples"
		}
		if !internal && !std && !strings.HasPrefix(imp, "github.com/jackc/pgx/v5") && imp != "connectrpc.com/connect" &&
			!strings.HasPrefix(imp, "google.golang.org/protobuf/") {
			return "an example is outside code: of the world it may import only the standard library, connect, pgx and protobuf"
		}
	case "adapters":
		if !internal {
			return ""
		}
		self := strings.SplitN(strings.TrimPrefix(pkg, "adapters/"), "/", 2)[0]
		if self == "projector" && !strings.HasPrefix(local, "proto/gen/") && !strings.HasPrefix(local, "adapters/projector") {
			return "the consumer kit is imported by outside modules: it may use only the published API (proto/gen)"
		}
		// The broker adapters are the plugs of the registry; the registry
		// (adapters/brokers) is the one package that imports them all.
		brokerAdapter := slices.Contains(brokers.Names(), self)
		other := strings.SplitN(strings.TrimPrefix(local, "adapters/"), "/", 2)[0]
		switch {
		case strings.HasPrefix(local, "application"), strings.HasPrefix(local, "bootstrap"):
			return "adapters must not import application or bootstrap"
		case strings.HasPrefix(local, "adapters/testkit") && self != "testkit":
			return "adapters/testkit is for tests only"
		case strings.HasPrefix(local, "adapters/brokerkit") && !(brokerAdapter || self == "contracttest"):
			return "adapters/brokerkit is shared by the broker adapters (and their contract suite) only"
		case strings.HasPrefix(local, "adapters/brokerplug") && !(brokerAdapter || self == "brokers" || self == "testkit" || self == "contracttest"):
			return "adapters/brokerplug is the contract of the broker adapters and their registry"
		case self == "brokers" && strings.HasPrefix(local, "adapters/") && !slices.Contains(brokers.Names(), other) && other != "brokerplug":
			return "the broker registry imports the broker adapters and their contract only"
		case strings.HasPrefix(local, "adapters/") && other != self && self != "brokers" &&
			other != "brokerkit" && other != "brokerplug" && !(self == "testkit" || self == "contracttest"):
			return "an adapter must not import another adapter"
		}
	}
	return ""
}

func TestViolationRules(t *testing.T) {
	cases := []struct {
		pkg, imp string
		bad      bool
	}{
		{"domain/order", "time", false},
		{"bootstrap", module + "/tools/seckill-bench", true},
		{"tools/seckill-bench", module + "/bootstrap", false},
		{"bootstrap/cmd/seckill", module + "/adapters/rocketmq", true},
		{"bootstrap/cmd/seckill", module + "/adapters/brokers", false},
		{"bootstrap/config", module + "/adapters/kafka/internal", true},
		{"tools/seckill-bench", module + "/tools/internal/pgcpu", false},
		{"domain/order", module + "/ports", true},
		{"domain/order", "github.com/jackc/pgx/v5", true},
		{"ports", module + "/domain/order", false},
		{"ports", module + "/application", true},
		{"application", module + "/ports", false},
		{"application", module + "/adapters/redis", true},
		{"application", "github.com/redis/go-redis/v9", true},
		{"adapters/redis", "github.com/redis/go-redis/v9", false},
		{"adapters/redis", module + "/adapters/postgres", true},
		{"adapters/redis", module + "/application", true},
		{"adapters/redis", module + "/adapters/testkit/redistest", true},
		{"adapters/rocketmq", module + "/adapters/rocketmq/internal", false},
		{"adapters/rabbitmq", module + "/adapters/brokerkit", false},
		{"adapters/redis", module + "/adapters/brokerkit", true},
		{"adapters/redis", module + "/adapters/brokerplug", true},
		{"adapters/rabbitmq", module + "/adapters/brokerplug", false},
		{"adapters/rabbitmq", module + "/adapters/brokers", true},
		{"adapters/brokers", module + "/adapters/rocketmq", false},
		{"adapters/brokers", module + "/adapters/rabbitmq", false},
		{"adapters/brokers", module + "/adapters/brokerplug", false},
		{"adapters/brokers", module + "/adapters/redis", true},
		{"bootstrap", module + "/adapters/redis", false},
		{"adapters/projector", module + "/proto/gen/seckill/v1", false},
		{"adapters/projector", module + "/domain/order", true},
		{"adapters/projector", module + "/ports", true},
		{"adapters/projector", "github.com/jackc/pgx/v5", false},
		{"examples/salesview", module + "/adapters/projector", false},
		{"examples/salesview/view", module + "/proto/gen/seckill/v1", false},
		{"examples/salesview", module + "/examples/salesview/view", false},
		{"examples/salesview", module + "/domain/order", true},
		{"examples/salesview", module + "/adapters/postgres", true},
		{"examples/salesview", module + "/bootstrap/config", true},
		{"examples/salesview", "connectrpc.com/connect", false},
		{"examples/salesview", "net/http", false},
		{"examples/salesview/view", "github.com/jackc/pgx/v5/pgxpool", false},
		{"examples/salesview", "github.com/redis/go-redis/v9", true},
	}
	for _, c := range cases {
		if got := violation(c.pkg, c.imp) != ""; got != c.bad {
			t.Errorf("violation(%q, %q) = %v, want %v", c.pkg, c.imp, got, c.bad)
		}
	}
}
