#!/usr/bin/env bash
# A 3-master Redis Cluster for developing and testing the Redis adapter on
# Redis Cluster (adapters/redis/README.md, section "Redis Cluster"): Debian's
# redis-server, 127.0.0.1 only, private ports, no replicas, no persistence
# (the cluster's topology survives a restart in nodes.conf; the data does
# not). It is the reference of the deploy/devstack component to be.
#
#   adapters/redis/cluster.sh up       start the nodes that are not running, create the cluster if it is
#                                      not created yet, wait until it is healthy, print the export line
#   adapters/redis/cluster.sh env      print the export line of a healthy cluster (exit 1 if not healthy)
#   adapters/redis/cluster.sh status   one line per node and the cluster's health
#   adapters/redis/cluster.sh down [--purge]
#                                      stop the nodes this script started, by the PID in their pid files;
#                                      --purge also deletes the state dir
#
# Settings: SECKILL_REDIS_CLUSTER_DIR (default /tmp/rc-seckill-$UID), SECKILL_REDIS_CLUSTER_PORTS
# (default "57001 57002 57003"; each node's cluster bus listens on its port - 10000, since the
# default bus port, port + 10000, does not exist above 55535). Typical use: eval "$(adapters/redis/cluster.sh up)"
set -euo pipefail

DIR=${SECKILL_REDIS_CLUSTER_DIR:-/tmp/rc-seckill-$(id -u)}
read -r -a PORTS <<<"${SECKILL_REDIS_CLUSTER_PORTS:-57001 57002 57003}"

log() { printf '%s [redis-cluster] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

addrs() {
	local out="" p
	for p in "${PORTS[@]}"; do out+="${out:+,}127.0.0.1:$p"; done
	printf '%s' "$out"
}

# pid_of PORT prints the PID of the node on PORT when its pid file names a live redis-server of this dir.
pid_of() {
	local f="$DIR/$1/redis.pid" pid
	[ -r "$f" ] || return 1
	pid=$(cat "$f")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || return 1
	printf '%s' "$pid"
}

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

write_conf() {
	local p=$1 d="$DIR/$1"
	mkdir -p "$d"
	cat >"$d/redis.conf" <<EOF
port $p
bind 127.0.0.1
protected-mode yes
daemonize yes
pidfile $d/redis.pid
logfile $d/redis.log
dir $d
cluster-enabled yes
cluster-config-file nodes.conf
cluster-port $((p - 10000))
cluster-node-timeout 5000
cluster-require-full-coverage yes
appendonly no
save ""
EOF
}

# healthy: cluster_state:ok and all 16384 slots assigned and ok, seen from every node.
healthy() {
	local p info
	for p in "${PORTS[@]}"; do
		info=$(cli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r') || return 1
		grep -qx 'cluster_state:ok' <<<"$info" || return 1
		grep -qx 'cluster_slots_assigned:16384' <<<"$info" || return 1
		grep -qx 'cluster_slots_ok:16384' <<<"$info" || return 1
		grep -qx "cluster_known_nodes:${#PORTS[@]}" <<<"$info" || return 1
	done
}

up() {
	command -v redis-server >/dev/null || die "redis-server is not installed (apt-get install redis-server)"
	local p i
	for p in "${PORTS[@]}"; do
		if pid_of "$p" >/dev/null; then continue; fi
		write_conf "$p"
		log "starting node 127.0.0.1:$p in $DIR/$p"
		redis-server "$DIR/$p/redis.conf"
	done
	for p in "${PORTS[@]}"; do
		for i in $(seq 1 100); do
			cli "$p" PING 2>/dev/null | grep -q PONG && break
			[ "$i" = 100 ] && die "node $p does not answer PING (log: $DIR/$p/redis.log)"
			sleep 0.1
		done
	done
	if [ "$(cli "${PORTS[0]}" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_slots_assigned://p')" = 0 ]; then
		local nodes=()
		for p in "${PORTS[@]}"; do nodes+=("127.0.0.1:$p"); done
		log "creating the cluster of ${nodes[*]}"
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >&2
	fi
	for i in $(seq 1 300); do
		healthy && break
		[ "$i" = 300 ] && die "cluster not healthy after 30 s (CLUSTER INFO on each node; logs in $DIR/*/redis.log)"
		sleep 0.1
	done
	env_line
}

env_line() { printf 'export SECKILL_REDIS_CLUSTER_ADDRS=%s\n' "$(addrs)"; }

status() {
	local p pid
	for p in "${PORTS[@]}"; do
		pid=$(pid_of "$p" || true)
		printf 'node 127.0.0.1:%s pid %s\n' "$p" "${pid:--}"
	done
	if healthy; then echo "cluster healthy"; else echo "cluster NOT healthy"; fi
}

down() {
	local p pid i
	for p in "${PORTS[@]}"; do
		pid=$(pid_of "$p") || continue
		log "stopping node $p (pid $pid)"
		kill -TERM "$pid"
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			[ "$i" = 100 ] && die "node $p (pid $pid) did not stop within 10 s"
			sleep 0.1
		done
	done
	if [ "${1:-}" = --purge ]; then
		log "deleting $DIR"
		rm -rf "$DIR"
	fi
}

case "${1:-}" in
up) up ;;
env) healthy || die "cluster not healthy"; env_line ;;
status) status ;;
down) down "${2:-}" ;;
*) die "usage: $0 up|env|status|down [--purge]" ;;
esac
