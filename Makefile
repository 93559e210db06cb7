# seckill: the two set-up commands are `make run` and `make test`.
# Everything else here is a building block of those two.

SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
STACK        := deploy/local/stack.sh
BIN          := bin/seckill
GO_TEST_FLAGS ?= -race -count=1 -timeout 40m
# Stack exports (SECKILL_PG_DSN, ...) for one recipe line.
WITH_STACK   := eval "$$($(STACK) up)" &&

.PHONY: help run salesview test unit up down status build generate check-generated check-breaking api-release lint bench-place bench-consume bench-events chaos cluster-sale hot-sku bench-timeouts bench-sale observe observe-down

## help: list the targets with their one-line description.
help:
	@grep -E '^## [a-z-]+( / [a-z-]+)*:' $(MAKEFILE_LIST) | sed 's/^## //'

## run: start the local stack, migrate, and serve the API with all workers and a demo activity.
run: build
	@$(WITH_STACK) ./$(BIN) migrate up && exec ./$(BIN) serve --seed-demo

## test: start the local stack (with every broker) and run every test, the linters and the generated-code check.
test:
	@eval "$$(SECKILL_STACK_BROKERS=all $(STACK) up)" && go vet ./... && go test $(GO_TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory lint check-generated

## salesview: the example projection consumer (examples/salesview) beside `make run`: its own database `salesview` on
## the stack's PostgreSQL, its view served as JSON on 127.0.0.1:7090 (SALESVIEW_* variables; examples/salesview/README.md).
salesview: build
	@$(WITH_STACK) export SALESVIEW_TOKEN="$${SALESVIEW_TOKEN:-$$(./$(BIN) token --user 900000100 --events --ttl 24h)}" && \
	  exec go run ./examples/salesview

## unit: the tests that need no local stack (domain, in-memory adapters, API, config; application, the consumer kit and the example run on the stack); seconds.
# An adapter package (adapters/NAME) is taken to talk to a server of the stack unless UNIT_ADAPTERS names it,
# so a new broker or store adapter needs no line here: `make test` runs it on the stack, `make unit` leaves it out.
UNIT_ADAPTERS = api brokerkit brokerplug brokers contracttest failpoint memory metrics system tracing
UNIT_PKGS = $$({ go list ./... | grep -v -E '/adapters/[^/]+$$|/application$$|/examples/|/application/scenarios$$|/adapters/redis/clustertest$$|/deploy/devstack$$|/adapters/testkit/(mqtest|pgtest|redisdb|redistest|benchkit)$$|/bootstrap$$|/bootstrap/cmd/|/tools/|/deploy/prometheus$$'; \
	go list $(addprefix ./adapters/,$(UNIT_ADAPTERS)); })
unit:
	@go test -count=1 $(UNIT_PKGS)

## observe: Jaeger and Prometheus (alert rules loaded) on loopback beside the stack; prints the OTEL_* line for `make run`.
observe:
	@$(STACK) up >/dev/null && deploy/local/observe.sh up
observe-down:
	@deploy/local/observe.sh down

## up / down / status: manage the local stack (PostgreSQL, Redis, RocketMQ) started by deploy/local/stack.sh.
up:
	@$(STACK) up >/dev/null && $(STACK) status
down:
	@$(STACK) down
status:
	@$(STACK) status

## build: bin/seckill, the service binary.
build:
	@mkdir -p bin && go build -o $(BIN) ./bootstrap/cmd/seckill

## build-bench: bin/seckill-bench (benchmarks and chaos) beside bin/seckill, which its sale and chaos start.
BENCH_BIN    := bin/seckill-bench
.PHONY: build-bench
build-bench: build
	@go build -o $(BENCH_BIN) ./tools/seckill-bench

## generate: regenerate protobuf/Connect code (buf, local plugins) and Wire injectors.
generate:
	go tool buf generate
	go tool wire gen ./bootstrap

## check-generated: fail when committed generated code differs from a fresh generation.
check-generated:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  go tool buf generate --output "$$tmp" && \
	  diff -r proto/gen "$$tmp/proto/gen" || { echo "proto/gen is stale: run make generate" >&2; exit 1; }
	@go tool wire diff ./bootstrap || { echo "bootstrap/wire_gen.go is stale: run make generate" >&2; exit 1; }
	@echo "generated code is current"

## check-breaking: fail when the API breaks a client of its last release: buf breaking (FILE rules, which include
## WIRE and WIRE_JSON) against the committed image of that release in proto/released/; then a self-test: a field
## renumbered in a copy of the API must fail the gate. Part of `make lint`.
API_RELEASE  := proto/released/api-v1.0.0.json
check-breaking:
	@go tool buf breaking --against $(API_RELEASE)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp -r proto buf.yaml "$$tmp"/ && rm -rf "$$tmp/proto/gen" && \
	  sed -i '0,/int64 activity_id = 1;/s//int64 activity_id = 99;/' "$$tmp/proto/seckill/v1/order.proto" && \
	  if go tool buf breaking "$$tmp" --against $(API_RELEASE) >/dev/null 2>&1; then \
	    echo "check-breaking: a renumbered field was not caught: the gate is not working" >&2; exit 1; fi
	@echo "API compatible with $(API_RELEASE)"

## api-release: write the image of the API as released (run when tagging a release; name it after the version in CHANGELOG.md).
api-release:
	@go tool buf build --exclude-source-info -o -#format=json | python3 -m json.tool --indent 1 > $(API_RELEASE)

## lint: buf lint, buf breaking (check-breaking), gofmt, golangci-lint (.golangci.yml) and shellcheck of every script; part of `make test`.
lint: check-breaking
	@go tool buf lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1; }
	@"$$(deploy/local/golangci-lint.sh)" run ./...
	@"$$(deploy/local/shellcheck.sh)" $$(git ls-files '*.sh') .ci/run

## bench-place / bench-consume / bench-timeouts / bench-sale: the benchmarks of docs/benchmarks.md.
bench-place: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) place
bench-consume: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) consume
bench-timeouts: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) timeouts
bench-sale: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) sale
## bench-events: the event subscription's catch-up, live delivery and the sale beside 20 subscribers (docs/benchmarks.md).
bench-events: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) events $(BENCH_EVENTS_FLAGS)

## hot-sku: one SKU's reservations with 1 and 3 stock lanes on the Redis Cluster, CPU per call of the busiest master (docs/capacity.md).
hot-sku: build-bench
	@$(WITH_STACK) ./$(BENCH_BIN) hot-sku $(HOT_SKU_FLAGS)

## cluster-sale: a hot-SKU sale on 3 API + 2 worker instances, the Redis Cluster and the two-broker RocketMQ cluster;
## kills one instance of each role and a broker mid-sale, prints the invariants and each instance's share (docs/capacity.md).
## The send bound defaults to 200 ms here (a send crosses the cluster proxy; docs/capacity.md). It kills a broker of the
## local stack's RocketMQ cluster: never run it beside `make test`.
cluster-sale: build-bench
	@eval "$$(SECKILL_STACK_ROCKETMQ_CLUSTER=1 $(STACK) up)" && \
	  SECKILL_SEND_TIMEOUT=$${SECKILL_SEND_TIMEOUT:-200ms} ./$(BENCH_BIN) cluster-sale $(CLUSTER_SALE_FLAGS)

## chaos: a sale on two service instances while stack processes are killed and paused (docs/operations.md).
## It kills processes of the local stack: never run it beside `make test`.
chaos: build-bench
	@$(WITH_STACK) ./$(BENCH_BIN) chaos
