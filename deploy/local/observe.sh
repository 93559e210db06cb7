#!/usr/bin/env bash
# Starts a trace backend (Jaeger, all-in-one, in-memory) and Prometheus (with the alert rules of
# deploy/prometheus loaded) on loopback beside the local stack, each stopped only by its own PID.
#
#   deploy/local/observe.sh up      idempotent; prints the OTEL_* export line a service needs to send traces
#   deploy/local/observe.sh down    stops what `up` started (by PID)
#   deploy/local/observe.sh status  one line per component
#
# Jaeger is built once from the Go module proxy (github.com/jaegertracing/jaeger, cmd/jaeger; a few minutes
# on a small machine) into the tools cache; Prometheus comes from Debian's package, unpacked (not installed)
# by deploy/local/promtool.sh. Ports (loopback only): Jaeger UI 16686, OTLP 4317 (gRPC) / 4318 (HTTP);
# Prometheus 9090, scraping the service's operations listener (SECKILL_OPS_ADDR, default 127.0.0.1:7081)
# and the broker's exporter (127.0.0.1:${SECKILL_BROKER_METRICS_PORT:-5557}).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
STATE_DIR=${SECKILL_STACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill/stack}/observe
TOOLS_DIR=${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}/tools
JAEGER_VERSION=v1.76.0
JAEGER_BIN=$TOOLS_DIR/jaeger-${JAEGER_VERSION#v}/jaeger
OPS_ADDR=${SECKILL_OPS_ADDR:-127.0.0.1:7081}
BROKER_METRICS=127.0.0.1:${SECKILL_BROKER_METRICS_PORT:-5557}
PROM_ADDR=127.0.0.1:${SECKILL_PROMETHEUS_PORT:-9090}

log() { printf '[observe] %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}
pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
pid_of() {
	if [ -s "$STATE_DIR/$1.pid" ]; then cat "$STATE_DIR/$1.pid"; fi
}

# spawn NAME CMD...: start CMD detached with its own pid file and log.
spawn() {
	local name=$1
	shift
	# shellcheck disable=SC2016 # $$, $0 and $@ are expanded by the child sh, on purpose.
	setsid sh -c 'echo $$ >"$0"; exec "$@"' "$STATE_DIR/$name.pid" "$@" </dev/null >>"$STATE_DIR/$name.log" 2>&1 &
	for _ in $(seq 1 50); do
		[ -s "$STATE_DIR/$name.pid" ] && return 0
		sleep 0.1
	done
	die "could not start $name"
}

wait_http() {
	local name=$1 url=$2
	for _ in $(seq 1 120); do
		curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null && return 0
		pid_alive "$(pid_of "$name")" || die "$name exited; see $STATE_DIR/$name.log"
		sleep 0.5
	done
	die "$name did not answer $url within 60 s; see $STATE_DIR/$name.log"
}

build_jaeger() {
	[ -x "$JAEGER_BIN" ] && return 0
	command -v go >/dev/null 2>&1 || die "go is needed to build Jaeger"
	log "building Jaeger $JAEGER_VERSION from the Go module proxy (once; a few minutes)"
	local src
	src=$(mktemp -d)
	# The module's go.mod has replace directives, so `go install pkg@version` refuses it: build it as the
	# main module from a copy of its source.
	GOFLAGS=-mod=mod go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" >"$src/download.json"
	local dir
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' "$src/download.json")
	[ -d "$dir" ] || die "could not download github.com/jaegertracing/jaeger@$JAEGER_VERSION"
	cp -r "$dir" "$src/jaeger" && chmod -R u+w "$src/jaeger"
	mkdir -p "$(dirname "$JAEGER_BIN")"
	(cd "$src/jaeger" && GOFLAGS=-mod=mod go build -o "$JAEGER_BIN.tmp" ./cmd/jaeger) || die "building Jaeger failed"
	mv -f "$JAEGER_BIN.tmp" "$JAEGER_BIN"
	rm -rf "$src"
}

prometheus_bin() {
	local promtool
	promtool=$("$SCRIPT_DIR/promtool.sh")
	[ -x "$(dirname "$promtool")/prometheus" ] || die "no prometheus beside $promtool"
	echo "$(dirname "$promtool")/prometheus"
}

# Jaeger's own configuration: OTLP in, memory storage, query UI, every listener on loopback (the built-in
# all-in-one configuration binds the UI to all interfaces).
write_jaeger_config() {
	cat >"$STATE_DIR/jaeger.yaml" <<'YAML'
# Written by deploy/local/observe.sh.
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:13133
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:16686
    grpc:
      endpoint: 127.0.0.1:16685
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:4317
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
}

write_prometheus_config() {
	cat >"$STATE_DIR/prometheus.yml" <<YAML
# Written by deploy/local/observe.sh.
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files:
  - $REPO_DIR/deploy/prometheus/rules.yml
scrape_configs:
  - job_name: seckill
    static_configs:
      - targets: ['$OPS_ADDR']
  - job_name: rocketmq-broker
    static_configs:
      - targets: ['$BROKER_METRICS']
YAML
}

cmd_up() {
	mkdir -p "$STATE_DIR"
	if ! pid_alive "$(pid_of jaeger)"; then
		build_jaeger
		write_jaeger_config
		log "starting Jaeger (UI http://127.0.0.1:16686, OTLP/HTTP 127.0.0.1:4318)"
		spawn jaeger "$JAEGER_BIN" --config "$STATE_DIR/jaeger.yaml"
	fi
	wait_http jaeger http://127.0.0.1:16686/
	if ! pid_alive "$(pid_of prometheus)"; then
		local prom
		prom=$(prometheus_bin)
		write_prometheus_config
		mkdir -p "$STATE_DIR/prometheus-data"
		log "starting Prometheus (http://$PROM_ADDR, rules of deploy/prometheus loaded)"
		spawn prometheus "$prom" --config.file="$STATE_DIR/prometheus.yml" --storage.tsdb.path="$STATE_DIR/prometheus-data" \
			--web.listen-address="$PROM_ADDR" --storage.tsdb.retention.time=1d
	fi
	wait_http prometheus "http://$PROM_ADDR/-/ready"
	log "up: Jaeger http://127.0.0.1:16686, Prometheus http://$PROM_ADDR (alerts: http://$PROM_ADDR/alerts)"
	echo "export OTEL_EXPORTER_OTLP_ENDPOINT='http://127.0.0.1:4318'"
}

cmd_down() {
	local name pid
	for name in prometheus jaeger; do
		pid=$(pid_of "$name")
		if pid_alive "$pid"; then
			log "stopping $name (pid $pid)"
			kill -TERM "$pid"
			for _ in $(seq 1 100); do
				pid_alive "$pid" || break
				sleep 0.1
			done
			pid_alive "$pid" && kill -KILL "$pid"
		fi
		rm -f "$STATE_DIR/$name.pid"
	done
}

cmd_status() {
	local name pid
	for name in jaeger prometheus; do
		pid=$(pid_of "$name")
		if pid_alive "$pid"; then echo "$name running, pid $pid"; else echo "$name stopped"; fi
	done
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
	sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
