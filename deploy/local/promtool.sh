#!/usr/bin/env bash
# Provides promtool, Prometheus' rule checker and rule unit-test runner, for the
# tests of deploy/prometheus (deploy/prometheus/rules_test.go runs it).
#
#   deploy/local/promtool.sh     idempotent: prints the path of a working promtool on stdout
#
# It does NOT install Debian's prometheus package (its postinst would create a
# user and could start a server): it downloads the .deb with `apt-get download`
# into the download cache (${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}/tools,
# the cache that `deploy/local/stack.sh down --purge` keeps), unpacks it there
# with `dpkg-deb -x` and reuses the unpacked binary on later runs. Needs apt-get
# and dpkg-deb the first time; every message goes to stderr.
set -euo pipefail

CACHE_DIR=${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}
TOOLS_DIR=$CACHE_DIR/tools
DEST=$TOOLS_DIR/prometheus
PROMTOOL=$DEST/usr/bin/promtool

log() { printf 'promtool.sh: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# An earlier unpack is reused as is (it is moved into place only once complete).
if [ -x "$PROMTOOL" ]; then
	printf '%s\n' "$PROMTOOL"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "promtool is missing and apt-get is not available: put promtool 2.42 (the unit tests expect its output) at $PROMTOOL by hand"
command -v dpkg-deb >/dev/null 2>&1 || die "promtool is missing and dpkg-deb is not available: put promtool 2.42 (the unit tests expect its output) at $PROMTOOL by hand"

mkdir -p "$TOOLS_DIR"
WORK=$(mktemp -d "$TOOLS_DIR/.prometheus.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# apt-get download writes into the current directory. As root it warns that
# the _apt user cannot write there; the download itself still works.
download() { (cd "$WORK" && DEBIAN_FRONTEND=noninteractive apt-get download -qq prometheus) >>"$WORK/apt.log" 2>&1; }

log "downloading Debian's prometheus package (for promtool only, nothing is installed)"
if ! download; then
	# Refresh the package lists only when the download failed (stale or missing lists).
	if [ "$(id -u)" != 0 ]; then
		cat "$WORK/apt.log" >&2
		die "apt-get download prometheus failed; refresh the package lists as root (sudo apt-get update) and run again"
	fi
	log "apt-get download failed; running apt-get update and trying once more"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$WORK/apt.log" 2>&1 || true
	if ! download; then
		cat "$WORK/apt.log" >&2
		die "apt-get download prometheus failed"
	fi
fi

debs=("$WORK"/prometheus_*.deb)
[ -f "${debs[0]}" ] || die "apt-get download reported success but left no prometheus_*.deb in $WORK"
dpkg-deb -x "${debs[0]}" "$WORK/root"
[ -x "$WORK/root/usr/bin/promtool" ] || die "${debs[0]##*/} holds no usr/bin/promtool"
version=$("$WORK/root/usr/bin/promtool" --version 2>&1 | head -n 1) || die "the unpacked promtool does not run: $version"
printf '%s\n' "${debs[0]##*/}" >"$WORK/root/.package"

# Move the finished tree into place in one rename; a concurrent run that got
# there first wins and its tree is used.
if ! mv -T "$WORK/root" "$DEST" 2>/dev/null; then
	if [ -x "$PROMTOOL" ]; then
		printf '%s\n' "$PROMTOOL"
		exit 0
	fi
	# A leftover without promtool: replace it.
	rm -rf "$DEST"
	mv -T "$WORK/root" "$DEST"
fi
log "unpacked ${debs[0]##*/} into $DEST ($version)"
printf '%s\n' "$PROMTOOL"
