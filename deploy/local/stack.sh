#!/usr/bin/env bash
# Local infrastructure for seckill: a private PostgreSQL, Redis, a 3-master Redis Cluster and RocketMQ 5 (namesrv +
# proxy in LOCAL mode with the broker embedded), all on 127.0.0.1, all state under one directory outside the repository.
#
#   deploy/local/stack.sh up [--quiet]   start whatever is not running, apply the topics/groups (seckill topology
#                                        apply, built into the state dir), print exports
#   deploy/local/stack.sh env            print the export lines of a running stack (exit 1 if not healthy)
#   deploy/local/stack.sh status         one line per component: pid, ports, RSS, healthy?
#   deploy/local/stack.sh down [--purge] [postgres|redis|redis-cluster|rocketmq|rabbitmq|kafka]...
#                                        stop the processes this script started (by PID; all components unless
#                                        named); --purge also deletes their data (whole state dir if none named)
#   deploy/local/stack.sh mqadmin ARGS   run RocketMQ's mqadmin against the local name server
#   up/env/status/down --rocketmq-cluster  also (down: only) the RocketMQ cluster mode: name server, broker-a,
#                                        broker-b, CLUSTER-mode proxy in <state>/rocketmq-cluster (exports point at it)
#   SECKILL_STACK_PG_STANDBY=sync|async   a PostgreSQL standby beside the primary (the DSN names both);
#   SECKILL_STACK_REDIS_REPLICAS=1       a replica per Redis Cluster master; both remembered in <state>/modes
#   SECKILL_STACK_BROKERS=rabbitmq,kafka|all  the other brokers too (SECKILL_BROKER=X selects X as well)
#
# Typical use:   eval "$(deploy/local/stack.sh up)"
# `up` prints ONLY `export ...` lines on stdout; every progress message goes to stderr.
# Documentation: docs/local-stack.md
#
# This script does only what needs a package manager: for `up` it installs the Debian packages (apt-get) and
# downloads the RocketMQ jars (mvn; seckill-stack runs mvn itself for the brokers whose plug describes their
# processes, so mvn is installed when one is selected). Then it builds the Go command that runs the stack (bin/seckill-stack from
# tools/seckill-stack, package deploy/devstack) and runs it with the same arguments.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)

# Settings (environment overrides are documented in docs/local-stack.md; seckill-stack reads the same ones).
STATE_DIR=${SECKILL_STACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill/stack}
CACHE_DIR=${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}
LOG_DIR=$STATE_DIR/logs
MARKER=$STATE_DIR/.seckill-stack
STACK_BIN=$REPO_DIR/bin/seckill-stack

RMQ_VERSION_CANDIDATES=(5.5.1 5.5.0 5.3.3)
MVN_DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

RMQ_VERSION=""
APT_UPDATED=0
QUIET=0

log() { [ "$QUIET" = 1 ] || printf '%s [stack] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '%s [stack] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	printf '%s [stack] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" = 0 ]; }
now_ms() { date +%s%3N; }

# The state dir's log dir (apt.log), created with the marker as seckill-stack would (it refuses a non-empty dir
# without the marker).
state_log_dir() {
	if [ -e "$STATE_DIR" ] && [ ! -e "$MARKER" ] && [ -n "$(ls -A "$STATE_DIR" 2>/dev/null)" ]; then
		die "state dir $STATE_DIR exists, is not empty and was not created by this script (no $MARKER); refusing to use it"
	fi
	mkdir -p "$LOG_DIR"
	[ -e "$MARKER" ] || printf 'seckill local stack state dir (deploy/local/stack.sh)\n' >"$MARKER"
}

# ---------------------------------------------------------------------------------------------------------------
# Prerequisites: find binaries, install from Debian when root, or explain what is missing
# ---------------------------------------------------------------------------------------------------------------
have_pg() {
	local d
	if [ -n "${SECKILL_PG_BINDIR:-}" ]; then
		[ -x "$SECKILL_PG_BINDIR/initdb" ] && [ -x "$SECKILL_PG_BINDIR/postgres" ] && [ -x "$SECKILL_PG_BINDIR/pg_ctl" ]
		return
	fi
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && [ -x "$d/postgres" ] && [ -x "$d/pg_ctl" ] && return 0
	done
	have initdb && have postgres && have pg_ctl
}

have_java() { { [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; } || have java; }

# RabbitMQ is selected for `up` (seckill-stack reads the same variables).
rabbitmq_selected() { [ "${SECKILL_STACK_RABBITMQ:-}" = 1 ] || broker_selected rabbitmq; }
# broker_selected NAME: NAME is in SECKILL_STACK_BROKERS (or it says all) or is SECKILL_BROKER.
broker_selected() {
	[ "${SECKILL_BROKER:-}" = "$1" ] && return 0
	case ",${SECKILL_STACK_BROKERS:-}," in *",$1,"* | *,all,*) return 0 ;; esac
	return 1
}
# Another broker than RocketMQ and RabbitMQ is selected: its processes come from Maven Central (mvn).
other_broker_selected() {
	[ -n "${SECKILL_STACK_BROKERS:-}" ] && [ "${SECKILL_STACK_BROKERS:-}" != rabbitmq ] && return 0
	case "${SECKILL_BROKER:-}" in '' | rocketmq | rabbitmq) return 1 ;; esac
}
# The node's start script and epmd (seckill-stack runs them as the current user, not the Debian service).
have_rabbitmq() { [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] && [ -x /usr/bin/epmd ]; }

apt_install() {
	local created_policy=0 rc=0
	state_log_dir
	log "installing Debian packages: $* (log: $LOG_DIR/apt.log)"
	# Keep the packages' own services (postgresql 'main' cluster on 5432, redis on 6379, rabbitmq-server on 5672 and
	# its epmd on 4369) from being started.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\n# temporary, written by seckill deploy/local/stack.sh during apt-get install\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		created_policy=1
	fi
	if [ "$APT_UPDATED" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update >>"$LOG_DIR/apt.log" 2>&1 || rc=$?
		APT_UPDATED=1
	fi
	if [ "$rc" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >>"$LOG_DIR/apt.log" 2>&1 || rc=$?
	fi
	[ "$created_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
	[ "$rc" = 0 ] || die "apt-get failed (exit $rc) installing: $*; see $LOG_DIR/apt.log"
}

# The JDK: Debian's 17 when the archive has it, else its default.
java_package() {
	if apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then echo openjdk-17-jre-headless; else echo default-jre-headless; fi
}

# ensure_prereqs NEED_MVN: make sure every program the stack needs exists; install (root + apt-get) or explain.
ensure_prereqs() {
	local need_mvn=$1 pkgs=() wanted=()
	have_pg || {
		pkgs+=(postgresql)
		wanted+=("PostgreSQL server binaries initdb/postgres/pg_ctl (Debian package: postgresql)")
	}
	have redis-server || {
		pkgs+=(redis-server)
		wanted+=("redis-server (Debian package: redis-server)")
	}
	have_java || {
		pkgs+=(JAVA)
		wanted+=("java 11+ (Debian package: openjdk-17-jre-headless)")
	}
	if rabbitmq_selected && ! have_rabbitmq; then
		pkgs+=(rabbitmq-server)
		wanted+=("RabbitMQ /usr/lib/rabbitmq/bin/rabbitmq-server and epmd (Debian package: rabbitmq-server), selected by SECKILL_STACK_RABBITMQ=1 or SECKILL_BROKER=rabbitmq")
	fi
	if [ "$need_mvn" = 1 ] && ! have mvn; then
		pkgs+=(maven)
		wanted+=("mvn (Debian package: maven), needed once to download RocketMQ (and a selected broker) into $CACHE_DIR")
	fi
	[ "${#pkgs[@]}" -gt 0 ] || return 0

	if is_root && have apt-get; then
		local p real=()
		for p in "${pkgs[@]}"; do
			if [ "$p" = JAVA ]; then real+=("$(java_package)"); else real+=("$p"); fi
		done
		apt_install "${real[@]}"
		hash -r
		have_pg || die "PostgreSQL binaries still not found after installing (looked in /usr/lib/postgresql/*/bin and PATH)"
		have redis-server || die "redis-server still not found after installing redis-server"
		have_java || die "java still not found after installing a JRE"
		if rabbitmq_selected; then have_rabbitmq || die "rabbitmq-server or epmd still not found after installing rabbitmq-server"; fi
		if [ "$need_mvn" = 1 ]; then have mvn || die "mvn still not found after installing maven"; fi
		return 0
	fi

	local m
	{
		printf '%s [stack] ERROR: missing prerequisites:\n' "$(date +%H:%M:%S)"
		for m in "${wanted[@]}"; do printf '  - %s\n' "$m"; done
		if ! is_root; then
			printf 'Not running as root, so nothing was installed. Install them, e.g.:\n'
		else
			printf 'apt-get is not available, so nothing was installed. Install the equivalent of:\n'
		fi
		local hint=() p2
		for p2 in "${pkgs[@]}"; do
			if [ "$p2" = JAVA ]; then hint+=(openjdk-17-jre-headless); else hint+=("$p2"); fi
		done
		printf '  sudo apt-get install -y %s\n' "${hint[*]}"
		printf 'or put the binaries on PATH (PostgreSQL: SECKILL_PG_BINDIR=/path/to/postgresql/bin; Java: JAVA_HOME).\n'
	} >&2
	exit 2
}

# ---------------------------------------------------------------------------------------------------------------
# RocketMQ runtime from Maven Central (cached outside the repository)
# ---------------------------------------------------------------------------------------------------------------
rmq_lib_complete() {
	local v=$1 d=$CACHE_DIR/rocketmq/$1/lib a
	[ -e "$CACHE_DIR/rocketmq/$v/.complete" ] || return 1
	for a in namesrv broker proxy tools; do
		[ -f "$d/rocketmq-$a-$v.jar" ] || return 1
	done
}

# True when the version seckill-stack will use (SECKILL_ROCKETMQ_VERSION or current-version) is complete.
rmq_cached() {
	local v=${SECKILL_ROCKETMQ_VERSION:-}
	[ -n "$v" ] || v=$(cat "$CACHE_DIR/rocketmq/current-version" 2>/dev/null || true)
	[ -n "$v" ] && rmq_lib_complete "$v"
}

# render TEMPLATE OUT KEY=VALUE...: replace @KEY@ by VALUE (no sed, so any character is safe in values).
render() {
	local tmpl=$1 out=$2 text kv
	shift 2
	text=$(<"$tmpl")
	for kv in "$@"; do
		text=${text//"@${kv%%=*}@"/"${kv#*=}"}
	done
	printf '%s\n' "$text" >"$out.tmp"
	mv -f "$out.tmp" "$out"
}

rmq_download() {
	local base=$CACHE_DIR/rocketmq v candidates=() t0
	if [ -n "${SECKILL_ROCKETMQ_VERSION:-}" ]; then
		candidates=("$SECKILL_ROCKETMQ_VERSION")
	else
		candidates=("${RMQ_VERSION_CANDIDATES[@]}")
	fi
	mkdir -p "$base"
	# One download at a time per cache (a second `up` waits, then finds the jars).
	if have flock; then
		exec 8>"$base/.download.lock"
		flock -w 900 8 || die "timed out waiting for the lock $base/.download.lock"
		if rmq_cached; then return 0; fi
	fi
	for v in "${candidates[@]}"; do
		if rmq_lib_complete "$v"; then
			RMQ_VERSION=$v
			break
		fi
		if [ -z "${SECKILL_ROCKETMQ_VERSION:-}" ] && [ -e "$base/$v/.unresolvable" ]; then
			log "RocketMQ $v: skipped (did not resolve earlier, see $base/$v/build/mvn.log; delete $base/$v to retry)"
			continue
		fi
		mkdir -p "$base/$v/build"
		render "$SCRIPT_DIR/rocketmq-pom.xml.tmpl" "$base/$v/build/pom.xml" "RMQ_VERSION=$v"
		rm -rf "$base/$v/lib.tmp"
		log "RocketMQ $v: resolving org.apache.rocketmq namesrv/broker/proxy/tools from Maven Central (mvn, log: $base/$v/build/mvn.log)"
		t0=$(now_ms)
		# shellcheck disable=SC2086 # SECKILL_MVN_ARGS is a list of extra arguments.
		if mvn -B -q -f "$base/$v/build/pom.xml" ${SECKILL_MVN_ARGS:-} "$MVN_DEP_PLUGIN:copy-dependencies" \
			-DincludeScope=runtime -DoutputDirectory="$base/$v/lib.tmp" >"$base/$v/build/mvn.log" 2>&1; then
			rm -rf "${base:?}/$v/lib"
			mv "$base/$v/lib.tmp" "$base/$v/lib"
			touch "$base/$v/.complete"
			rm -f "$base/$v/.unresolvable"
			if rmq_lib_complete "$v"; then
				log "RocketMQ $v: $(find "$base/$v/lib" -name '*.jar' | wc -l) jars in $base/$v/lib ($(($(now_ms) - t0)) ms)"
				RMQ_VERSION=$v
				break
			fi
			rm -f "$base/$v/.complete"
			warn "RocketMQ $v: dependencies copied but the rocketmq-{namesrv,broker,proxy,tools}-$v jars are missing"
		else
			warn "RocketMQ $v: could not be resolved from Maven Central ($(grep -m1 -o 'Could not find artifact [^ ]*' "$base/$v/build/mvn.log" || echo 'see mvn.log'))"
		fi
		rm -rf "$base/$v/lib.tmp"
		date -u +%FT%TZ >"$base/$v/.unresolvable"
	done
	[ -n "$RMQ_VERSION" ] || die "no RocketMQ version could be resolved from Maven Central (tried: ${candidates[*]}); see $base/*/build/mvn.log"
	echo "$RMQ_VERSION" >"$base/current-version"
}

# ---------------------------------------------------------------------------------------------------------------
# The Go command that runs the stack
# ---------------------------------------------------------------------------------------------------------------
# True when $STACK_BIN is missing, was built from another checkout, or is older than a Go file of the packages it
# is built from (deploy/devstack, tools/seckill-stack, bootstrap/clikit, and through the broker registry
# adapters/, ports/ and domain/), go.mod or go.sum.
stack_bin_stale() {
	[ -x "$STACK_BIN" ] && [ "$(cat "$STACK_BIN.src" 2>/dev/null || true)" = "$REPO_DIR" ] || return 0
	[ -n "$(cd "$REPO_DIR" && find deploy/devstack tools/seckill-stack bootstrap/clikit adapters ports domain go.mod go.sum \
		-type f \( -name '*.go' ! -name '*_test.go' -o -name go.mod -o -name go.sum \) -newer "$STACK_BIN" -print -quit)" ]
}

stack_build() {
	stack_bin_stale || return 0
	have go || die "go is not on PATH: the stack is run by a Go command (the README requires Go)"
	local t0 tmp=$STACK_BIN.$$
	t0=$(now_ms)
	mkdir -p "$(dirname "$STACK_BIN")"
	if ! (cd "$REPO_DIR" && go build -o "$tmp" ./tools/seckill-stack) >&2; then
		rm -f "$tmp"
		die "go build ./tools/seckill-stack failed"
	fi
	mv -f "$tmp" "$STACK_BIN"
	echo "$REPO_DIR" >"$STACK_BIN.src"
	log "built $STACK_BIN ($(($(now_ms) - t0)) ms)"
}

usage() {
	sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
}

main() {
	case "${1:-}" in
	up)
		local a
		for a in "$@"; do [ "$a" != --quiet ] || QUIET=1; done
		rmq_cached || {
			ensure_prereqs 1
			rmq_download
		}
		if other_broker_selected; then ensure_prereqs 1; else ensure_prereqs 0; fi
		;;
	down | status | env | mqadmin) ;;
	-h | --help | help)
		usage
		exit 0
		;;
	*)
		usage >&2
		exit 64
		;;
	esac
	stack_build
	SECKILL_STACK_REPO=$REPO_DIR exec "$STACK_BIN" "$@"
}

main "$@"
