#!/usr/bin/env bash
# Local infrastructure for seckill: a private PostgreSQL, Redis and RocketMQ 5 (namesrv + proxy in LOCAL
# mode with the broker embedded), all on 127.0.0.1, all state under one directory outside the repository.
#
#   deploy/local/stack.sh up [--quiet]   start whatever is not running, apply the topics/groups (seckill topology
#                                        apply, built into the state dir), print exports
#   deploy/local/stack.sh env            print the export lines of a running stack (exit 1 if not healthy)
#   deploy/local/stack.sh status         one line per component: pid, ports, RSS, healthy?
#   deploy/local/stack.sh down [--purge] [postgres|redis|rocketmq]...
#                                        stop the processes this script started (by PID; all components unless
#                                        named); --purge also deletes their data (whole state dir if none named)
#   deploy/local/stack.sh mqadmin ARGS   run RocketMQ's mqadmin against the local name server
#
# Typical use:   eval "$(deploy/local/stack.sh up)"
# `up` prints ONLY `export ...` lines on stdout; every progress message goes to stderr.
# Documentation: docs/local-stack.md
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ---------------------------------------------------------------------------------------------------------------
# Settings (environment overrides are documented in docs/local-stack.md)
# ---------------------------------------------------------------------------------------------------------------
STATE_DIR=${SECKILL_STACK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill/stack}
CACHE_DIR=${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}

PG_PORT=${SECKILL_PG_PORT:-55432}
REDIS_PORT=${SECKILL_REDIS_PORT:-56379}
NAMESRV_PORT=${SECKILL_NAMESRV_PORT:-9876}
PROXY_PORT=${SECKILL_PROXY_PORT:-8081}
REMOTING_PORT=${SECKILL_PROXY_REMOTING_PORT:-8080}
BROKER_PORT=${SECKILL_BROKER_PORT:-10911}
# The broker also listens on listenPort-2 (fast remoting) and listenPort+1 (HA, all interfaces).
BROKER_FAST_PORT=$((BROKER_PORT - 2))
BROKER_HA_PORT=$((BROKER_PORT + 1))
# The broker's own Prometheus exporter (consumer ready/lag counts and the age of the oldest unconsumed message per
# group, which the service re-exports as mq_consumer_ready / mq_consumer_lag_*).
BROKER_METRICS_PORT=${SECKILL_BROKER_METRICS_PORT:-5557}

RMQ_VERSION_CANDIDATES=(5.5.1 5.5.0 5.3.3)
RMQ_CLUSTER=DefaultCluster
RMQ_BROKER_NAME=broker-a
MVN_DEP_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.6.1

NAMESRV_JAVA_OPTS_DEFAULT="-Xms128m -Xmx256m -XX:MaxDirectMemorySize=128m -XX:+UseSerialGC"
PROXY_JAVA_OPTS_DEFAULT="-Xms512m -Xmx1g -XX:MaxDirectMemorySize=512m -XX:+UseG1GC"
ADMIN_JAVA_OPTS_DEFAULT="-Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"

RUN_DIR=$STATE_DIR/run
LOG_DIR=$STATE_DIR/logs
PG_ROOT=$STATE_DIR/pg
PG_DATA=$PG_ROOT/data
PG_SOCK_DIR=$PG_ROOT/run
REDIS_DIR=$STATE_DIR/redis
RMQ_HOME=$STATE_DIR/rocketmq
RMQ_CONF=$RMQ_HOME/conf
RMQ_STORE=$RMQ_HOME/store
RMQ_LOGS=$RMQ_HOME/logs/rocketmqlogs
MARKER=$STATE_DIR/.seckill-stack
# The service binary, built from this repository for `seckill topology apply|check` (seckill_build).
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
SECKILL_BIN=$STATE_DIR/bin/seckill

PG_DSN="postgres://seckill:seckill@127.0.0.1:${PG_PORT}/seckill?sslmode=disable"

# Filled in at run time.
PG_BINDIR=""
PG_OS_USER=""
RMQ_VERSION=""
RMQ_LIB=""
APT_UPDATED=0
QUIET=0

# ---------------------------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------------------------
log() { [ "$QUIET" = 1 ] || printf '%s [stack] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '%s [stack] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	printf '%s [stack] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2
	exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" = 0 ]; }
now_ms() { date +%s%3N; }

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 5<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Best-effort description of the process listening on a port ("" if unknown).
port_owner() {
	local port=$1
	if have ss; then
		ss -Hltnp "sport = :$port" 2>/dev/null | head -n 1 | sed 's/  */ /g'
	fi
}

# PID of the process listening on a port, if ss can tell.
port_owner_pid() {
	port_owner "$1" | sed -n 's/.*pid=\([0-9][0-9]*\).*/\1/p' | head -n 1
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

read_pid() {
	if [ -s "$1" ]; then head -n 1 "$1" | tr -dc '0-9'; fi
}

proc_cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }
proc_cwd() { readlink "/proc/$1/cwd" 2>/dev/null || true; }

# is_ours PID CWD NEEDLE: the process runs in our directory and its command line contains NEEDLE.
is_ours() {
	local pid=$1 cwd=$2 needle=$3
	pid_alive "$pid" || return 1
	[ "$(proc_cwd "$pid")" = "$cwd" ] || return 1
	case "$(proc_cmdline "$pid")" in *"$needle"*) return 0 ;; *) return 1 ;; esac
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# RSS of a process plus its direct children (PostgreSQL: postmaster + backends/aux processes).
rss_tree_kb() {
	local root=$1 total=0 p ppid
	total=$(rss_kb "$root")
	for p in /proc/[0-9]*; do
		ppid=$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null || true)
		if [ "$ppid" = "$root" ]; then
			total=$((total + $(rss_kb "${p#/proc/}")))
		fi
	done
	echo "$total"
}

# Proportional set size of a process plus its direct children (shared memory counted once overall).
pss_tree_kb() {
	local root=$1 total=0 p ppid v
	for p in /proc/[0-9]*; do
		ppid=$(awk '/^PPid:/ {print $2}' "$p/status" 2>/dev/null || true)
		if [ "${p#/proc/}" = "$root" ] || [ "$ppid" = "$root" ]; then
			v=$(awk '/^Pss:/ {print $2}' "$p/smaps_rollup" 2>/dev/null || true)
			total=$((total + ${v:-0}))
		fi
	done
	echo "$total"
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

# Start a long-running process detached from this shell (own session, stdin /dev/null, output to a log file,
# our stdout copy (fd 3) and the lock (fd 9) closed so `eval "$(stack.sh up)"` never waits for it).
# The child writes its own PID (sh's $$, kept by exec) to PIDFILE, which is exact even if setsid forks.
# spawn PIDFILE OUTFILE CWD CMD...
spawn() {
	local pidfile=$1 out=$2 cwd=$3 i
	shift 3
	rm -f "$pidfile"
	local launcher=()
	if have setsid; then launcher=(setsid); else launcher=(nohup); fi
	# shellcheck disable=SC2016 # $$, $0, $1 and $@ are expanded by the child sh, on purpose.
	"${launcher[@]}" sh -c 'echo $$ >"$0"; cd "$1" || exit 1; shift; exec "$@"' "$pidfile" "$cwd" "$@" \
		</dev/null >>"$out" 2>&1 3>&- 9>&- &
	for i in $(seq 1 50); do
		[ -s "$pidfile" ] && return 0
		sleep 0.1
	done
	die "could not start $* (no pid file $pidfile)"
}

# stop_pid NAME PID [FIRST_SIGNAL] [TIMEOUT_S]: signal, wait, then SIGKILL that PID.
stop_pid() {
	local name=$1 pid=$2 sig=${3:-TERM} timeout=${4:-30} waited=0
	pid_alive "$pid" || return 0
	log "stopping $name (pid $pid, SIG$sig)"
	kill "-$sig" "$pid" 2>/dev/null || true
	while pid_alive "$pid"; do
		if [ "$waited" -ge $((timeout * 10)) ]; then
			warn "$name (pid $pid) still running after ${timeout}s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			break
		fi
		sleep 0.1
		waited=$((waited + 1))
	done
	log "$name stopped"
}

# Refuse to start NAME when one of PORTS is already taken by a process that is not ours.
ensure_ports_free() {
	local name=$1 port owner
	shift
	for port in "$@"; do
		if port_open "$port"; then
			owner=$(port_owner "$port")
			die "port 127.0.0.1:$port (needed by $name) is already in use by a process this script did not start${owner:+: $owner}. Stop it, or choose other ports (see docs/local-stack.md, e.g. SECKILL_PG_PORT / SECKILL_REDIS_PORT / SECKILL_NAMESRV_PORT / SECKILL_PROXY_PORT / SECKILL_BROKER_PORT)."
		fi
	done
}

# If a port is served by a process of ours whose pid file was lost, adopt it (rewrite the pid file).
adopt_by_port() {
	local pidfile=$1 cwd=$2 needle=$3 port=$4 pid
	port_open "$port" || return 1
	pid=$(port_owner_pid "$port")
	[ -n "$pid" ] || return 1
	if is_ours "$pid" "$cwd" "$needle"; then
		echo "$pid" >"$pidfile"
		log "adopted running process $pid on port $port (pid file was missing)"
		return 0
	fi
	return 1
}

# ---------------------------------------------------------------------------------------------------------------
# Directories, lock
# ---------------------------------------------------------------------------------------------------------------
init_state_dir() {
	if [ -e "$STATE_DIR" ] && [ ! -e "$MARKER" ] && [ -n "$(ls -A "$STATE_DIR" 2>/dev/null)" ]; then
		die "state dir $STATE_DIR exists, is not empty and was not created by this script (no $MARKER); refusing to use it"
	fi
	mkdir -p "$STATE_DIR" "$RUN_DIR" "$LOG_DIR" "$REDIS_DIR" "$RMQ_HOME" "$RMQ_CONF" "$RMQ_STORE"
	[ -e "$MARKER" ] || printf 'seckill local stack state dir (deploy/local/stack.sh)\n' >"$MARKER"
}

acquire_lock() {
	have flock || return 0
	exec 9>"$STATE_DIR/.lock"
	if ! flock -n 9; then
		log "another stack.sh is running on $STATE_DIR; waiting for it"
		flock -w 900 9 || die "timed out waiting for the lock $STATE_DIR/.lock"
	fi
}

# ---------------------------------------------------------------------------------------------------------------
# Prerequisites: find binaries, install from Debian when root, or explain what is missing
# ---------------------------------------------------------------------------------------------------------------
find_pg_bindir() {
	local d
	if [ -n "${SECKILL_PG_BINDIR:-}" ]; then
		PG_BINDIR=$SECKILL_PG_BINDIR
		[ -x "$PG_BINDIR/initdb" ] && [ -x "$PG_BINDIR/postgres" ] && [ -x "$PG_BINDIR/pg_ctl" ] && return 0
		PG_BINDIR=""
		return 1
	fi
	# Highest installed Debian major version first.
	for d in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -t/ -k5,5nr); do
		if [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && [ -x "$d/pg_ctl" ]; then
			PG_BINDIR=$d
			return 0
		fi
	done
	if have initdb && have postgres && have pg_ctl; then
		PG_BINDIR=$(dirname "$(readlink -f "$(command -v postgres)")")
		return 0
	fi
	PG_BINDIR=""
	return 1
}

psql_bin() {
	if [ -n "$PG_BINDIR" ] && [ -x "$PG_BINDIR/psql" ]; then echo "$PG_BINDIR/psql"; else command -v psql || true; fi
}

java_bin() {
	if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then echo "$JAVA_HOME/bin/java"; else command -v java || true; fi
}

apt_install() {
	local created_policy=0 rc=0
	log "installing Debian packages: $* (log: $LOG_DIR/apt.log)"
	# Keep the packages' own services (postgresql 'main' cluster on 5432, redis on 6379) from being started.
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

java_package() {
	if apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then echo openjdk-17-jre-headless; else echo default-jre-headless; fi
}

# ensure_prereqs NEED_MVN: make sure every binary `up` needs exists; install (root + apt-get) or explain.
ensure_prereqs() {
	local need_mvn=$1 pkgs=() wanted=()
	find_pg_bindir || {
		pkgs+=(postgresql)
		wanted+=("PostgreSQL server binaries initdb/postgres/pg_ctl (Debian package: postgresql)")
	}
	if [ -z "$(psql_bin)" ] && [ -n "$PG_BINDIR" ]; then
		pkgs+=(postgresql-client)
		wanted+=("psql (Debian package: postgresql-client)")
	fi
	have redis-server || {
		pkgs+=(redis-server)
		wanted+=("redis-server (Debian package: redis-server)")
	}
	if [ -z "$(java_bin)" ]; then
		pkgs+=(JAVA)
		wanted+=("java 11+ (Debian package: openjdk-17-jre-headless)")
	fi
	if [ "$need_mvn" = 1 ] && ! have mvn; then
		pkgs+=(maven)
		wanted+=("mvn (Debian package: maven), needed once to download RocketMQ into $CACHE_DIR/rocketmq")
	fi
	[ "${#pkgs[@]}" -gt 0 ] || return 0

	if is_root && have apt-get; then
		local p real=()
		for p in "${pkgs[@]}"; do
			if [ "$p" = JAVA ]; then real+=("$(java_package)"); else real+=("$p"); fi
		done
		apt_install "${real[@]}"
		hash -r
		find_pg_bindir || die "PostgreSQL binaries still not found after installing (looked in /usr/lib/postgresql/*/bin and PATH)"
		have redis-server || die "redis-server still not found after installing redis-server"
		[ -n "$(java_bin)" ] || die "java still not found after installing a JRE"
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

# Decide which version to use without network access. Sets RMQ_VERSION/RMQ_LIB or returns 1 (download needed).
rmq_pick_cached() {
	local base=$CACHE_DIR/rocketmq v=""
	if [ -n "${SECKILL_ROCKETMQ_VERSION:-}" ]; then
		v=$SECKILL_ROCKETMQ_VERSION
	elif [ -s "$base/current-version" ]; then
		v=$(<"$base/current-version")
	fi
	if [ -n "$v" ] && rmq_lib_complete "$v"; then
		RMQ_VERSION=$v
		RMQ_LIB=$base/$v/lib
		return 0
	fi
	return 1
}

rmq_download() {
	local base=$CACHE_DIR/rocketmq v candidates=() t0
	if [ -n "${SECKILL_ROCKETMQ_VERSION:-}" ]; then
		candidates=("$SECKILL_ROCKETMQ_VERSION")
	else
		candidates=("${RMQ_VERSION_CANDIDATES[@]}")
	fi
	mkdir -p "$base"
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
	RMQ_LIB=$base/$RMQ_VERSION/lib
}

# ---------------------------------------------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------------------------------------------
pg_pidfile() { echo "$RUN_DIR/postgres.pid"; }

pg_pid() {
	local pid=""
	[ -s "$PG_DATA/postmaster.pid" ] && pid=$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null | tr -dc '0-9')
	[ -n "$pid" ] || pid=$(read_pid "$(pg_pidfile)")
	echo "$pid"
}

pg_alive() {
	local pid
	pid=$(pg_pid)
	[ -n "$pid" ] && is_ours "$pid" "$PG_DATA" postgres
}

pg_probe() {
	local psql
	psql=$(psql_bin)
	[ -n "$psql" ] || return 1
	[ "$(PGCONNECT_TIMEOUT=3 "$psql" "$PG_DSN" -XAtqc 'select 1' 2>/dev/null)" = 1 ]
}

pg_healthy() { pg_alive && pg_probe; }

# Root: PostgreSQL refuses to run as root, so it runs as an unprivileged OS user.
pg_choose_user() {
	if ! is_root; then
		PG_OS_USER=$(id -un)
		return 0
	fi
	PG_OS_USER=${SECKILL_PG_OS_USER:-}
	if [ -z "$PG_OS_USER" ]; then
		if id postgres >/dev/null 2>&1; then PG_OS_USER=postgres; else PG_OS_USER=seckill-pg; fi
	fi
	if ! id "$PG_OS_USER" >/dev/null 2>&1; then
		log "creating system user $PG_OS_USER to run PostgreSQL (it refuses to run as root)"
		useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$PG_OS_USER" ||
			die "could not create system user $PG_OS_USER"
	fi
}

as_pg() {
	if is_root; then
		if have runuser; then
			runuser -u "$PG_OS_USER" -- "$@"
		else
			# shellcheck disable=SC2016 # expanded by the target shell
			su -s /bin/sh "$PG_OS_USER" -c '"$0" "$@"' -- "$@"
		fi
	else
		"$@"
	fi
}

# Root only: let the PostgreSQL OS user traverse (x, not read) the directories above its data dir, e.g. /root (700).
pg_grant_traverse() {
	is_root || return 0
	local d=$PG_ROOT parts=() p
	while [ "$d" != / ] && [ -n "$d" ]; do
		parts=("$d" "${parts[@]}")
		d=$(dirname "$d")
	done
	for p in "${parts[@]}"; do
		[ "$p" = "$PG_ROOT" ] && continue
		if ! as_pg test -x "$p" 2>/dev/null; then
			if have setfacl && setfacl -m "u:$PG_OS_USER:--x" "$p" 2>/dev/null; then
				log "granted search permission (ACL u:$PG_OS_USER:--x) on $p so PostgreSQL can reach its data dir"
			else
				chmod o+x "$p"
				log "granted search permission (chmod o+x) on $p so PostgreSQL ($PG_OS_USER) can reach its data dir"
			fi
		fi
	done
	as_pg test -w "$PG_ROOT" || die "PostgreSQL user $PG_OS_USER cannot write $PG_ROOT"
}

pg_socket_dir() {
	# Unix socket paths are limited to ~107 bytes; fall back to a short private dir under /tmp.
	local sock=$PG_SOCK_DIR/.s.PGSQL.$PG_PORT
	if [ "${#sock}" -le 100 ]; then
		echo "$PG_SOCK_DIR"
	else
		echo "/tmp/seckill-pg-$(id -u)-$(printf '%s' "$STATE_DIR" | sha256sum | cut -c1-12)"
	fi
}

pg_write_conf() {
	local sockdir=$1
	cat >"$PG_DATA/seckill.conf" <<EOF
# Written by deploy/local/stack.sh on every start; edit the script, not this file.
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sockdir'
max_connections = 300
shared_buffers = 256MB
# Durability stays at the defaults on purpose (benchmarks must be honest).
fsync = on
synchronous_commit = on
full_page_writes = on
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] %q%u@%d '
log_timezone = 'UTC'
timezone = 'UTC'
EOF
	grep -q "^include_if_exists = 'seckill.conf'" "$PG_DATA/postgresql.conf" ||
		printf "\ninclude_if_exists = 'seckill.conf'\n" >>"$PG_DATA/postgresql.conf"
	is_root && chown "$PG_OS_USER:" "$PG_DATA/seckill.conf" "$PG_DATA/postgresql.conf"
	return 0
}

pg_start() {
	local sockdir pid psql ver bin_ver t0
	pg_choose_user
	mkdir -p "$PG_ROOT"
	sockdir=$(pg_socket_dir)
	mkdir -p "$sockdir"
	touch "$LOG_DIR/postgres.log"
	if is_root; then
		chown "$PG_OS_USER:" "$PG_ROOT" "$sockdir" "$LOG_DIR/postgres.log"
		[ ! -d "$PG_DATA" ] || chown -R "$PG_OS_USER:" "$PG_DATA"
	fi
	chmod 700 "$PG_ROOT" "$sockdir"
	pg_grant_traverse

	bin_ver=$("$PG_BINDIR/postgres" --version | sed -n 's/.* \([0-9][0-9]*\)\..*/\1/p')
	if [ -s "$PG_DATA/PG_VERSION" ]; then
		ver=$(<"$PG_DATA/PG_VERSION")
		[ "$ver" = "$bin_ver" ] || die "$PG_DATA was created by PostgreSQL $ver but the binaries in $PG_BINDIR are $bin_ver; run 'stack.sh down --purge' or point SECKILL_PG_BINDIR at PostgreSQL $ver"
	else
		log "postgres: initdb $PG_DATA (PostgreSQL $bin_ver, superuser seckill, run as OS user $PG_OS_USER)"
		rm -rf "$PG_DATA"
		local pwfile=$PG_ROOT/.pwfile
		printf 'seckill\n' >"$pwfile"
		is_root && chown "$PG_OS_USER:" "$pwfile"
		chmod 600 "$pwfile"
		as_pg "$PG_BINDIR/initdb" -D "$PG_DATA" --username=seckill --pwfile="$pwfile" \
			--auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --no-locale \
			>"$LOG_DIR/initdb.log" 2>&1 || die "initdb failed; see $LOG_DIR/initdb.log"
		rm -f "$pwfile"
	fi
	pg_write_conf "$sockdir"
	# A postmaster that was just killed can linger a moment (exiting, or a zombie not yet reaped); PostgreSQL
	# refuses to start while the PID in postmaster.pid still exists.
	local old_pid i
	old_pid=$(pg_pid)
	if [ -n "$old_pid" ] && pid_alive "$old_pid"; then
		for i in $(seq 1 100); do
			pid_alive "$old_pid" || break
			sleep 0.1
		done
	fi
	ensure_ports_free postgres "$PG_PORT"
	log "postgres: starting on 127.0.0.1:$PG_PORT (log: $LOG_DIR/postgres.log)"
	t0=$(now_ms)
	local launcher=()
	have setsid && launcher=(setsid)
	# pg_ctl forks the postmaster itself; run it in its own session with our fds closed.
	local pg_ctl=("$PG_BINDIR/pg_ctl" -D "$PG_DATA" -l "$LOG_DIR/postgres.log" -w -t 120 start)
	is_root && pg_ctl=(runuser -u "$PG_OS_USER" -- "${pg_ctl[@]}")
	if ! "${launcher[@]}" "${pg_ctl[@]}" </dev/null >>"$LOG_DIR/pg_ctl.log" 2>&1 3>&- 9>&-; then
		if tail -n 5 "$LOG_DIR/postgres.log" | grep -q 'lock file "postmaster.pid" already exists'; then
			warn "postgres: stale postmaster.pid (pid $old_pid); retrying in 3 s"
			sleep 3
			"${launcher[@]}" "${pg_ctl[@]}" </dev/null >>"$LOG_DIR/pg_ctl.log" 2>&1 3>&- 9>&- ||
				die "pg_ctl start failed; see $LOG_DIR/postgres.log and $LOG_DIR/pg_ctl.log"
		else
			tail -n 10 "$LOG_DIR/postgres.log" >&2 || true
			die "pg_ctl start failed; see $LOG_DIR/postgres.log and $LOG_DIR/pg_ctl.log"
		fi
	fi
	pid=$(pg_pid)
	echo "$pid" >"$(pg_pidfile)"
	psql=$(psql_bin)
	# Idempotent: role (bootstrap superuser) and database.
	"$psql" -X -h "$sockdir" -p "$PG_PORT" -U seckill -d postgres -v ON_ERROR_STOP=1 -Atq \
		-c "ALTER ROLE seckill WITH SUPERUSER LOGIN PASSWORD 'seckill'" >/dev/null ||
		die "could not configure role seckill"
	if [ "$("$psql" -X -h "$sockdir" -p "$PG_PORT" -U seckill -d postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'seckill'")" != 1 ]; then
		"$psql" -X -h "$sockdir" -p "$PG_PORT" -U seckill -d postgres -v ON_ERROR_STOP=1 -q -c "CREATE DATABASE seckill" ||
			die "could not create database seckill"
	fi
	pg_probe || die "postgres started (pid $pid) but '$PG_DSN' does not answer"
	log "postgres: ready, pid $pid ($(($(now_ms) - t0)) ms)"
}

pg_ensure() {
	local pid
	pid=$(pg_pid)
	if pg_alive; then
		echo "$pid" >"$(pg_pidfile)"
		if pg_probe; then
			log "postgres: running, pid $pid"
			return 0
		fi
		log "postgres: pid $pid alive but not answering yet; waiting"
		local i
		for i in $(seq 1 60); do
			pg_probe && {
				log "postgres: ready, pid $pid"
				return 0
			}
			sleep 0.5
		done
		warn "postgres: pid $pid does not answer; restarting it"
		stop_pid postgres "$pid" INT 30
	fi
	pg_start
}

pg_stop() {
	local pid
	pid=$(pg_pid)
	if [ -n "$pid" ] && pid_alive "$pid"; then
		if is_ours "$pid" "$PG_DATA" postgres; then
			# SIGINT = PostgreSQL "fast" shutdown (SIGTERM would wait for every client to disconnect).
			stop_pid postgres "$pid" INT 60
		else
			warn "postgres: pid $pid from the pid file is not our PostgreSQL; not touching it"
		fi
	fi
	rm -f "$(pg_pidfile)"
}

# ---------------------------------------------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------------------------------------------
redis_pidfile() { echo "$RUN_DIR/redis.pid"; }
redis_alive() {
	local pid
	pid=$(read_pid "$(redis_pidfile)")
	[ -n "$pid" ] && is_ours "$pid" "$REDIS_DIR" redis-server
}

redis_probe() {
	# PING over /dev/tcp: no redis-cli needed.
	local reply
	reply=$(
		exec 2>/dev/null
		exec 5<>"/dev/tcp/127.0.0.1/$REDIS_PORT" || exit 1
		printf 'PING\r\n' >&5
		IFS= read -r -t 3 line <&5 || exit 1
		printf '%s' "$line"
	) || return 1
	[ "${reply%$'\r'}" = "+PONG" ]
}

redis_healthy() { redis_alive && redis_probe; }

redis_start() {
	local bin pid i t0
	bin=$(command -v redis-server)
	cat >"$REDIS_DIR/redis.conf" <<EOF
# Written by deploy/local/stack.sh on every start.
bind 127.0.0.1
port $REDIS_PORT
protected-mode no
daemonize no
dir "$REDIS_DIR"
logfile "$LOG_DIR/redis.log"
appendonly yes
appendfsync everysec
# AOF is the persistence; no RDB snapshots (no fork pauses during tests).
save ""
EOF
	ensure_ports_free redis "$REDIS_PORT"
	log "redis: starting on 127.0.0.1:$REDIS_PORT (log: $LOG_DIR/redis.log)"
	t0=$(now_ms)
	spawn "$(redis_pidfile)" "$LOG_DIR/redis.out" "$REDIS_DIR" "$bin" "$REDIS_DIR/redis.conf"
	pid=$(read_pid "$(redis_pidfile)")
	for i in $(seq 1 100); do
		redis_probe && {
			log "redis: ready, pid $pid ($(($(now_ms) - t0)) ms)"
			return 0
		}
		pid_alive "$pid" || break
		sleep 0.1
	done
	tail -n 20 "$LOG_DIR/redis.log" >&2 2>/dev/null || true
	die "redis did not become ready (pid $pid); see $LOG_DIR/redis.log"
}

redis_ensure() {
	local pid
	pid=$(read_pid "$(redis_pidfile)")
	if ! redis_alive && adopt_by_port "$(redis_pidfile)" "$REDIS_DIR" redis-server "$REDIS_PORT"; then
		pid=$(read_pid "$(redis_pidfile)")
	fi
	if redis_alive; then
		if redis_probe; then
			log "redis: running, pid $pid"
			return 0
		fi
		warn "redis: pid $pid alive but does not answer PING; restarting it"
		stop_pid redis "$pid" TERM 20
	fi
	redis_start
}

redis_stop() {
	local pid
	pid=$(read_pid "$(redis_pidfile)")
	if [ -n "$pid" ] && pid_alive "$pid"; then
		if is_ours "$pid" "$REDIS_DIR" redis-server; then
			stop_pid redis "$pid" TERM 30
		else
			warn "redis: pid $pid from the pid file is not our Redis; not touching it"
		fi
	fi
	rm -f "$(redis_pidfile)"
}

# ---------------------------------------------------------------------------------------------------------------
# RocketMQ processes
# ---------------------------------------------------------------------------------------------------------------
NAMESRV_MAIN=org.apache.rocketmq.namesrv.NamesrvStartup
PROXY_MAIN=org.apache.rocketmq.proxy.ProxyStartup
ADMIN_MAIN=org.apache.rocketmq.tools.command.MQAdminStartup

namesrv_pidfile() { echo "$RUN_DIR/namesrv.pid"; }
proxy_pidfile() { echo "$RUN_DIR/proxy.pid"; }

namesrv_alive() {
	local pid
	pid=$(read_pid "$(namesrv_pidfile)")
	[ -n "$pid" ] && is_ours "$pid" "$RMQ_HOME" "$NAMESRV_MAIN"
}
proxy_alive() {
	local pid
	pid=$(read_pid "$(proxy_pidfile)")
	[ -n "$pid" ] && is_ours "$pid" "$RMQ_HOME" "$PROXY_MAIN"
}
namesrv_probe() { port_open "$NAMESRV_PORT"; }
proxy_probe() { port_open "$PROXY_PORT" && port_open "$BROKER_PORT" && port_open "$REMOTING_PORT"; }
namesrv_healthy() { namesrv_alive && namesrv_probe; }
proxy_healthy() { proxy_alive && proxy_probe; }

# Common JVM options (array RMQ_COMMON).
rmq_common_opts() {
	local extra=()
	read -r -a extra <<<"${SECKILL_RMQ_JAVA_OPTS:-}"
	RMQ_COMMON=(-Duser.home="$RMQ_HOME" -Drocketmq.home.dir="$RMQ_HOME" -XX:-OmitStackTraceInFastThrow "${extra[@]}")
}

namesrv_spawn() {
	local java opts=()
	java=$(java_bin)
	rmq_common_opts
	read -r -a opts <<<"${SECKILL_NAMESRV_JAVA_OPTS:-$NAMESRV_JAVA_OPTS_DEFAULT}"
	printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$NAMESRV_PORT" >"$RMQ_CONF/namesrv.conf"
	ensure_ports_free namesrv "$NAMESRV_PORT"
	[ ! -f "$LOG_DIR/namesrv.out" ] || mv -f "$LOG_DIR/namesrv.out" "$LOG_DIR/namesrv.out.1"
	log "namesrv: starting RocketMQ $RMQ_VERSION name server on 127.0.0.1:$NAMESRV_PORT (logs: $LOG_DIR/namesrv.out, $RMQ_LOGS/namesrv.log)"
	NAMESRV_T0=$(now_ms)
	spawn "$(namesrv_pidfile)" "$LOG_DIR/namesrv.out" "$RMQ_HOME" "$java" "${opts[@]}" "${RMQ_COMMON[@]}" \
		-Drmq.logback.configurationFile=rmq.namesrv.logback.xml -cp "$RMQ_LIB/*" "$NAMESRV_MAIN" -c "$RMQ_CONF/namesrv.conf"
	echo "$RMQ_VERSION" >"$RMQ_HOME/namesrv.version"
}

namesrv_wait() {
	rmq_wait namesrv "$(namesrv_pidfile)" 'The Name Server boot success' namesrv_probe "$NAMESRV_T0" 60 \
		"$LOG_DIR/namesrv.out and $RMQ_LOGS/namesrv.log"
}

# rmq_wait NAME PIDFILE MARKER PROBE T0 SECONDS LOGS waits until NAME's
# console output ($LOG_DIR/NAME.out) shows MARKER and PROBE succeeds, then
# logs the time since T0 (ms); it dies naming LOGS when the process exits
# or SECONDS pass first.
rmq_wait() {
	local name=$1 pidfile=$2 marker=$3 probe=$4 t0=$5 secs=$6 logs=$7 pid i out="$LOG_DIR/$1.out"
	pid=$(read_pid "$pidfile")
	for i in $(seq 1 $((secs * 10))); do
		if grep -q "$marker" "$out" 2>/dev/null && "$probe"; then
			log "$name: ready, pid $pid ($(($(now_ms) - t0)) ms)"
			return 0
		fi
		if ! pid_alive "$pid"; then
			tail -n 30 "$out" >&2 || true
			die "$name (pid $pid) exited during startup; see $logs"
		fi
		sleep 0.1
	done
	die "$name (pid $pid) not ready after $secs s; see $logs"
}

proxy_spawn() {
	local java opts=()
	java=$(java_bin)
	rmq_common_opts
	read -r -a opts <<<"${SECKILL_PROXY_JAVA_OPTS:-$PROXY_JAVA_OPTS_DEFAULT}"
	render "$SCRIPT_DIR/broker.conf.tmpl" "$RMQ_CONF/broker.conf" \
		"NAMESRV_PORT=$NAMESRV_PORT" "BROKER_PORT=$BROKER_PORT" "STORE_DIR=$RMQ_STORE" "METRICS_PORT=$BROKER_METRICS_PORT"
	render "$SCRIPT_DIR/rmq-proxy.json.tmpl" "$RMQ_CONF/rmq-proxy.json" \
		"NAMESRV_PORT=$NAMESRV_PORT" "PROXY_PORT=$PROXY_PORT" "REMOTING_PORT=$REMOTING_PORT"
	ensure_ports_free "proxy/broker" "$PROXY_PORT" "$REMOTING_PORT" "$BROKER_PORT" "$BROKER_FAST_PORT" "$BROKER_HA_PORT" "$BROKER_METRICS_PORT"
	[ ! -f "$LOG_DIR/proxy.out" ] || mv -f "$LOG_DIR/proxy.out" "$LOG_DIR/proxy.out.1"
	log "proxy: starting RocketMQ $RMQ_VERSION proxy (LOCAL mode, embedded broker $RMQ_BROKER_NAME) gRPC 127.0.0.1:$PROXY_PORT, remoting $REMOTING_PORT, broker $BROKER_PORT (logs: $LOG_DIR/proxy.out, $RMQ_LOGS/{proxy,broker}.log)"
	PROXY_T0=$(now_ms)
	spawn "$(proxy_pidfile)" "$LOG_DIR/proxy.out" "$RMQ_HOME" "$java" "${opts[@]}" "${RMQ_COMMON[@]}" \
		-Drmq.logback.configurationFile=rmq.proxy.logback.xml -cp "$RMQ_LIB/*" "$PROXY_MAIN" \
		-pm local -bc "$RMQ_CONF/broker.conf" -pc "$RMQ_CONF/rmq-proxy.json" -n "127.0.0.1:$NAMESRV_PORT"
	echo "$RMQ_VERSION" >"$RMQ_HOME/proxy.version"
}

proxy_wait() {
	rmq_wait proxy "$(proxy_pidfile)" 'rocketmq-proxy startup successfully' proxy_probe "$PROXY_T0" 180 \
		"$LOG_DIR/proxy.out, $RMQ_LOGS/proxy.log and $RMQ_LOGS/broker.log"
}

rmq_stop_one() {
	local name=$1 main=$2 pidfile=$3 timeout=$4 pid
	pid=$(read_pid "$pidfile")
	if [ -n "$pid" ] && pid_alive "$pid"; then
		if is_ours "$pid" "$RMQ_HOME" "$main"; then
			stop_pid "$name" "$pid" TERM "$timeout"
		else
			warn "$name: pid $pid from the pid file is not our $name; not touching it"
		fi
	fi
	rm -f "$pidfile"
}

# ---------------------------------------------------------------------------------------------------------------
# mqadmin
# ---------------------------------------------------------------------------------------------------------------
admin_cmd() {
	local java opts=()
	java=$(java_bin)
	rmq_common_opts
	read -r -a opts <<<"$ADMIN_JAVA_OPTS_DEFAULT"
	ADMIN=("$java" "${opts[@]}" "${RMQ_COMMON[@]}" -Drmq.logback.configurationFile=rmq.tools.logback.xml -cp "$RMQ_LIB/*" "$ADMIN_MAIN")
}

# admin_start OUTFILE ARGS...: start one mqadmin JVM in the background (pid in ADMIN_PID), output in OUTFILE.
admin_start() {
	local out=$1
	shift
	admin_cmd
	: >"$out"
	NAMESRV_ADDR=127.0.0.1:$NAMESRV_PORT "${ADMIN[@]}" "$@" </dev/null >"$out" 2>&1 3>&- 9>&- &
	ADMIN_PID=$!
}

# admin_run OUTFILE EARLY_PATTERN ARGS...: run one mqadmin JVM. Returns as soon as the JVM exits or
# EARLY_PATTERN (grep -E) appears in OUTFILE: mqadmin spends its last ~3 s in NettyRemotingClient.shutdown()
# (a 3 s event-queue poll) after the work is done; that JVM is left to finish on its own.
# mqadmin exits 0 even on failure: callers grep OUTFILE.
admin_run() {
	local out=$1 pattern=$2 i
	shift 2
	admin_start "$out" "$@"
	for i in $(seq 1 600); do
		pid_alive "$ADMIN_PID" || break
		if [ -n "$pattern" ] && grep -Eq -- "$pattern" "$out" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	if pid_alive "$ADMIN_PID"; then
		kill -TERM "$ADMIN_PID" 2>/dev/null || true
		warn "mqadmin $1 did not finish within 60 s"
		return 1
	fi
	wait "$ADMIN_PID" 2>/dev/null || true
	return 0
}

broker_log_size() { stat -c %s "$RMQ_LOGS/broker.log" 2>/dev/null || echo 0; }

# True once broker.log has a name-server registration written after byte offset REG_BASELINE.
rmq_registered_since_baseline() {
	local size
	size=$(broker_log_size)
	[ "$size" -ge "${REG_BASELINE:-0}" ] || return 0 # rolled over: assume new content
	tail -c +"$((${REG_BASELINE:-0} + 1))" "$RMQ_LOGS/broker.log" 2>/dev/null |
		grep -q 'Registering current broker to name server completed'
}

# Wait until the name server lists our broker (real readiness: the broker registered itself).
# The broker usually registers while starting, but sometimes only with its periodic task (10 s later, also
# the way it re-registers with a restarted name server): wait for a registration line written to broker.log
# during this run first (up to 30 s), so no mqadmin JVM is wasted, then confirm with mqadmin clusterList.
rmq_wait_cluster() {
	local out=$RMQ_HOME/admin-clusterList.out t0 i
	t0=$(now_ms)
	for i in $(seq 1 300); do
		rmq_registered_since_baseline && break
		sleep 0.1
	done
	for i in $(seq 1 12); do
		admin_run "$out" "[[:space:]]127\\.0\\.0\\.1:${BROKER_PORT}[[:space:]]" clusterList -n "127.0.0.1:$NAMESRV_PORT" || true
		if grep -Eq "${RMQ_CLUSTER}[[:space:]]+${RMQ_BROKER_NAME}[[:space:]]+0[[:space:]]+127\\.0\\.0\\.1:${BROKER_PORT}[[:space:]]" "$out"; then
			log "rocketmq: mqadmin clusterList shows $RMQ_BROKER_NAME at 127.0.0.1:$BROKER_PORT ($(($(now_ms) - t0)) ms)"
			return 0
		fi
		log "rocketmq: broker not registered with the name server yet (attempt $i); retrying"
		sleep 2
	done
	cat "$out" >&2
	die "the broker did not show up in 'mqadmin clusterList' within ~90 s; see $RMQ_LOGS/broker.log"
}

# ---------------------------------------------------------------------------------------------------------------
# Topics and consumer groups: defined once in Go (adapters/rocketmq/topology.go), applied and checked by the
# service binary's `seckill topology apply|check` over the broker's remoting port (no mqadmin JVM)
# ---------------------------------------------------------------------------------------------------------------
# True when $SECKILL_BIN is missing, was built from another checkout, or is older than a Go source file (tests
# aside), go.mod or go.sum of this one.
seckill_bin_stale() {
	[ -x "$SECKILL_BIN" ] && [ "$(cat "$SECKILL_BIN.src" 2>/dev/null || true)" = "$REPO_DIR" ] || return 0
	[ -n "$(find "$REPO_DIR" -name .git -prune -o -type f \( -name '*.go' ! -name '*_test.go' -o -name go.mod -o -name go.sum \) \
		-newer "$SECKILL_BIN" -print -quit)" ]
}

# Build the service binary into the state dir when it is stale (later calls reuse it).
seckill_build() {
	seckill_bin_stale || return 0
	have go || die "go is not on PATH: the stack applies its topics and groups with the service binary (the README requires Go)"
	local t0 tmp=$SECKILL_BIN.$$
	t0=$(now_ms)
	mkdir -p "$(dirname "$SECKILL_BIN")"
	if ! (cd "$REPO_DIR" && go build -o "$tmp" ./bootstrap/cmd/seckill); then
		rm -f "$tmp"
		die "go build ./bootstrap/cmd/seckill failed"
	fi
	mv -f "$tmp" "$SECKILL_BIN"
	echo "$REPO_DIR" >"$SECKILL_BIN.src"
	log "built $SECKILL_BIN from $REPO_DIR ($(($(now_ms) - t0)) ms)"
}

# topology apply|check [FLAGS...]: `seckill topology` against this stack, with $SECKILL_TOPOLOGY_ARGS.
topology() {
	local sub=$1 extra=()
	shift
	read -r -a extra <<<"${SECKILL_TOPOLOGY_ARGS:-}"
	"$SECKILL_BIN" topology "$sub" --broker "127.0.0.1:$BROKER_PORT" --namesrv "127.0.0.1:$NAMESRV_PORT" \
		--prefix "${SECKILL_TOPIC_PREFIX:-}" "${extra[@]}" "$@"
}

# Apply the topology (writes only what differs, waits for the name server's routes), then check it.
rmq_topology_ensure() {
	local out=$RMQ_HOME/topology.out t0 v
	for v in SECKILL_TOPIC_QUEUES SECKILL_EXTRA_GROUPS ${!SECKILL_RETRY_MAX_*}; do
		[ -z "${!v:-}" ] || warn "$v is no longer read; use SECKILL_TOPOLOGY_ARGS (docs/local-stack.md)"
	done
	seckill_build
	t0=$(now_ms)
	if ! topology apply >"$out" 2>&1; then
		sed 's/^/    /' "$out" >&2
		die "seckill topology apply failed; see $RMQ_LOGS/broker.log"
	fi
	grep '^applied: ' "$out" | while IFS= read -r v; do log "rocketmq: $v"; done || true
	if ! topology check >"$out" 2>&1; then
		sed 's/^/    /' "$out" >&2
		die "seckill topology check failed after apply"
	fi
	log "rocketmq: $(tail -n 1 "$out") ($(($(now_ms) - t0)) ms)"
}

# ---------------------------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------------------------
print_exports() {
	printf "export SECKILL_PG_DSN='%s'\n" "$PG_DSN"
	printf "export SECKILL_REDIS_ADDR='127.0.0.1:%s'\n" "$REDIS_PORT"
	printf "export SECKILL_ROCKETMQ_ENDPOINT='127.0.0.1:%s'\n" "$PROXY_PORT"
	printf "export SECKILL_ROCKETMQ_NAMESRV='127.0.0.1:%s'\n" "$NAMESRV_PORT"
	printf "export SECKILL_ROCKETMQ_BROKER='127.0.0.1:%s'\n" "$BROKER_PORT"
	printf "export SECKILL_ROCKETMQ_METRICS_URL='http://127.0.0.1:%s/metrics'\n" "$BROKER_METRICS_PORT"
	printf "export SECKILL_TOPIC_PREFIX='%s'\n" "${SECKILL_TOPIC_PREFIX:-}"
	printf "export SECKILL_STACK_DIR='%s'\n" "$STATE_DIR"
	# This proxy accepts invisible durations from 1 s (minInvisibleTimeMillsForRecv), so the messages a crashed
	# consumer held come back after 4 s instead of the service's 10 s default (docs/operations.md).
	printf "export SECKILL_INVISIBLE_DURATION='%s'\n" "${SECKILL_INVISIBLE_DURATION:-4s}"
}

cmd_up() {
	local t0 need_mvn=0 started_rmq=0
	t0=$(now_ms)
	# Everything but the final export lines goes to stderr.
	exec 3>&1 1>&2
	init_state_dir
	acquire_lock

	REG_BASELINE=$(broker_log_size)
	rmq_pick_cached || need_mvn=1
	ensure_prereqs "$need_mvn"
	[ "$need_mvn" = 0 ] || rmq_download
	log "state dir $STATE_DIR; RocketMQ $RMQ_VERSION from $RMQ_LIB"

	# namesrv first (JVM start overlaps with PostgreSQL/Redis), then PostgreSQL and Redis, then the proxy.
	local namesrv_pid
	namesrv_pid=$(read_pid "$(namesrv_pidfile)")
	if ! namesrv_alive && adopt_by_port "$(namesrv_pidfile)" "$RMQ_HOME" "$NAMESRV_MAIN" "$NAMESRV_PORT"; then
		namesrv_pid=$(read_pid "$(namesrv_pidfile)")
	fi
	local namesrv_spawned=0
	if namesrv_alive; then
		if ! namesrv_probe; then
			warn "namesrv: pid $namesrv_pid alive but port $NAMESRV_PORT closed; restarting it"
			stop_pid namesrv "$namesrv_pid" TERM 20
			namesrv_spawn
			namesrv_spawned=1
		else
			log "namesrv: running, pid $namesrv_pid"
		fi
	else
		namesrv_spawn
		namesrv_spawned=1
	fi

	pg_ensure
	redis_ensure
	[ "$namesrv_spawned" = 0 ] || {
		namesrv_wait
		started_rmq=1
	}

	local proxy_pid
	proxy_pid=$(read_pid "$(proxy_pidfile)")
	if ! proxy_alive && adopt_by_port "$(proxy_pidfile)" "$RMQ_HOME" "$PROXY_MAIN" "$PROXY_PORT"; then
		proxy_pid=$(read_pid "$(proxy_pidfile)")
	fi
	if proxy_alive; then
		if proxy_probe; then
			log "proxy: running, pid $proxy_pid"
		else
			# Probably still starting (another `up` was interrupted); otherwise it is wedged: restart it.
			log "proxy: pid $proxy_pid alive but its ports are not open; waiting up to 60 s"
			local i
			for i in $(seq 1 600); do
				proxy_probe && break
				proxy_alive || break
				sleep 0.1
			done
			if ! proxy_probe; then
				warn "proxy: pid $proxy_pid still not serving; restarting it"
				stop_pid proxy "$proxy_pid" TERM 90
				proxy_spawn
				proxy_wait
			fi
			started_rmq=1
		fi
	else
		proxy_spawn
		proxy_wait
		started_rmq=1
	fi
	local running
	running=$(cat "$RMQ_HOME/proxy.version" 2>/dev/null || true)
	[ -z "$running" ] || [ "$running" = "$RMQ_VERSION" ] ||
		warn "the running proxy is RocketMQ $running but $RMQ_VERSION is selected; run 'stack.sh down' then 'up' to switch"

	# Real readiness after any RocketMQ (re)start: the broker is registered with the name server.
	[ "$started_rmq" = 0 ] || rmq_wait_cluster
	# Topics and groups; the check includes the name server's routes (a restarted name server only knows what
	# the broker re-registered).
	rmq_topology_ensure

	log "up: all healthy in $(($(now_ms) - t0)) ms (postgres 127.0.0.1:$PG_PORT, redis 127.0.0.1:$REDIS_PORT, namesrv 127.0.0.1:$NAMESRV_PORT, proxy gRPC 127.0.0.1:$PROXY_PORT, broker 127.0.0.1:$BROKER_PORT)"
	print_exports >&3
}

all_healthy() { pg_healthy && redis_healthy && namesrv_healthy && proxy_healthy; }

cmd_env() {
	if [ ! -e "$MARKER" ] || ! all_healthy; then
		printf 'seckill local stack is not running (or not healthy) in %s; run: deploy/local/stack.sh up\n' "$STATE_DIR" >&2
		exit 1
	fi
	print_exports
}

status_line() {
	local name=$1 pid=$2 ports=$3 healthy=$4 rss=$5 detail=$6
	printf '%-10s %-8s %-38s %-8s %-9s %s\n' "$name" "${pid:--}" "$ports" "$healthy" "$rss" "$detail"
}

fmt_mb() { [ -n "${1:-}" ] && [ "$1" != 0 ] && printf '%dMiB' $(($1 / 1024)) || printf -- '-'; }

cmd_status() {
	local ok=0 pid h rss pss ver="" tout=$STATE_DIR/.status.topology
	if [ ! -e "$MARKER" ]; then
		echo "no stack in $STATE_DIR (run: deploy/local/stack.sh up)"
		exit 1
	fi
	printf '%-10s %-8s %-38s %-8s %-9s %s\n' COMPONENT PID PORTS HEALTHY RSS DETAIL
	pid=$(pg_pid)
	pg_alive || pid=""
	find_pg_bindir || true
	if pg_healthy; then h=yes; else h=no; ok=1; fi
	rss="" pss=""
	[ -z "$pid" ] || {
		rss=$(rss_tree_kb "$pid")
		pss=$(pss_tree_kb "$pid")
	}
	status_line postgres "$pid" "$PG_PORT" "$h" "$(fmt_mb "$rss")" "RSS summed over postmaster+children (PSS $(fmt_mb "$pss")), data $PG_DATA"
	pid=$(read_pid "$(redis_pidfile)")
	redis_alive || pid=""
	if redis_healthy; then h=yes; else h=no; ok=1; fi
	rss=""
	[ -z "$pid" ] || rss=$(rss_kb "$pid")
	status_line redis "$pid" "$REDIS_PORT" "$h" "$(fmt_mb "$rss")" "dir $REDIS_DIR, PING"
	ver=$(cat "$RMQ_HOME/proxy.version" 2>/dev/null || true)
	pid=$(read_pid "$(namesrv_pidfile)")
	namesrv_alive || pid=""
	if namesrv_healthy; then h=yes; else h=no; ok=1; fi
	rss=""
	[ -z "$pid" ] || rss=$(rss_kb "$pid")
	status_line namesrv "$pid" "$NAMESRV_PORT" "$h" "$(fmt_mb "$rss")" "RocketMQ ${ver:-?}"
	pid=$(read_pid "$(proxy_pidfile)")
	proxy_alive || pid=""
	if proxy_healthy; then h=yes; else h=no; ok=1; fi
	rss=""
	[ -z "$pid" ] || rss=$(rss_kb "$pid")
	status_line proxy "$pid" "grpc $PROXY_PORT,remoting $REMOTING_PORT,broker $BROKER_PORT" "$h" "$(fmt_mb "$rss")" "LOCAL mode, embedded $RMQ_BROKER_NAME"
	seckill_build
	if topology check --timeout 10s >"$tout" 2>&1; then
		status_line resources - "-" yes - "$(sed -n 's/^topology: //p' "$tout" | tail -n 1)"
	elif grep -q 'difference(s) from the topology' "$tout"; then
		status_line resources - "-" no - "$(grep -vc '^seckill: ' "$tout") difference(s) from the topology (up re-applies them; seckill topology check lists them)"
		ok=1
	else
		status_line resources - "-" no - "$(tail -n 1 "$tout")"
		ok=1
	fi
	rm -f "$tout"
	echo "state dir: $STATE_DIR   logs: $LOG_DIR, $RMQ_LOGS"
	return "$ok"
}

cmd_down() {
	local purge=0 a comps=() all=1
	for a in "$@"; do
		case "$a" in
		--purge) purge=1 ;;
		postgres | redis | rocketmq) comps+=("$a") ;;
		namesrv | proxy) comps+=(rocketmq) ;;
		*) die "unknown argument for down: $a (use: down [--purge] [postgres|redis|rocketmq]...)" ;;
		esac
	done
	[ "${#comps[@]}" = 0 ] || all=0
	want() { [ "$all" = 1 ] || [[ " ${comps[*]} " == *" $1 "* ]]; }
	if [ ! -e "$MARKER" ]; then
		log "nothing to stop: no stack in $STATE_DIR"
		return 0
	fi
	acquire_lock
	is_root && pg_choose_user
	# The proxy takes ~15-20 s to stop (embedded broker shutdown); PostgreSQL and Redis stop in parallel with it.
	local pids=()
	if want rocketmq; then
		rmq_stop_one proxy "$PROXY_MAIN" "$(proxy_pidfile)" 90 &
		pids+=($!)
	fi
	if want postgres; then
		pg_stop &
		pids+=($!)
	fi
	if want redis; then
		redis_stop &
		pids+=($!)
	fi
	[ "${#pids[@]}" = 0 ] || wait "${pids[@]}" || true
	want rocketmq && rmq_stop_one namesrv "$NAMESRV_MAIN" "$(namesrv_pidfile)" 30
	if [ "$purge" = 1 ]; then
		[ -e "$MARKER" ] || die "refusing to purge $STATE_DIR (no $MARKER)"
		if [ "$all" = 1 ]; then
			log "purging $STATE_DIR (data and logs; the download cache $CACHE_DIR is kept)"
			rm -rf "$PG_ROOT" "$(pg_socket_dir)"
			rm -rf "${STATE_DIR:?}"
		else
			if want postgres; then
				log "purging PostgreSQL data $PG_ROOT"
				rm -rf "$PG_ROOT" "$(pg_socket_dir)" "$LOG_DIR/postgres.log"
			fi
			if want redis; then
				log "purging Redis data $REDIS_DIR"
				rm -rf "$REDIS_DIR"
			fi
			if want rocketmq; then
				log "purging RocketMQ data $RMQ_HOME (store, name server kv, logs)"
				rm -rf "$RMQ_HOME"
			fi
		fi
	fi
	log "down: done"
}

cmd_mqadmin() {
	init_state_dir
	rmq_pick_cached || die "RocketMQ is not downloaded yet; run 'stack.sh up' first"
	admin_cmd
	NAMESRV_ADDR=127.0.0.1:$NAMESRV_PORT exec "${ADMIN[@]}" "$@"
}

usage() {
	sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
}

main() {
	local cmd=${1:-}
	[ $# -eq 0 ] || shift
	case "$cmd" in
	up)
		[ "${1:-}" != --quiet ] || QUIET=1
		cmd_up
		;;
	down) cmd_down "$@" ;;
	status) cmd_status ;;
	env) cmd_env ;;
	mqadmin) cmd_mqadmin "$@" ;;
	-h | --help | help) usage ;;
	*)
		usage >&2
		exit 64
		;;
	esac
}

main "$@"
