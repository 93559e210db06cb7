# seckill: the two set-up commands are `make run` and `make test`.
# Everything else here is a building block of those two.

SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
STACK        := deploy/local/stack.sh
BIN          := bin/seckill
GO_TEST_FLAGS ?= -race -count=1 -timeout 40m
# Stack exports (SECKILL_PG_DSN, ...) for one recipe line.
WITH_STACK   := eval "$$($(STACK) up)" &&

.PHONY: run test up down status build generate check-generated lint bench-place bench-consume chaos bench-timeouts bench-sale observe observe-down

## run: start the local stack, migrate, and serve the API with all workers and a demo activity.
run: build
	@$(WITH_STACK) ./$(BIN) migrate up && exec ./$(BIN) serve --seed-demo

## test: start the local stack and run every test, the linters and the generated-code check.
test:
	@$(WITH_STACK) go vet ./... && go test $(GO_TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory lint check-generated

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

build:
	@mkdir -p bin && go build -o $(BIN) ./bootstrap/cmd/seckill

## build-bench: the benchmarks and chaos binary, bin/seckill-bench, beside bin/seckill (which its
## sale and chaos start as `seckill serve`).
BENCH_BIN    := bin/seckill-bench
.PHONY: build-bench
build-bench: build
	@go build -o $(BENCH_BIN) ./bootstrap/cmd/seckill-bench

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

lint:
	@go tool buf lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1; }

## bench-place / bench-consume: the benchmark commands (see docs/benchmarks.md).
bench-place: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) place
bench-consume: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) consume
bench-timeouts: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) timeouts
bench-sale: build-bench
	@$(WITH_STACK) ./$(BIN) migrate up && ./$(BENCH_BIN) sale

## chaos: a sale on two service instances while stack processes are killed and paused (docs/operations.md).
## It kills processes of the local stack: never run it beside `make test`.
chaos: build-bench
	@$(WITH_STACK) ./$(BENCH_BIN) chaos
