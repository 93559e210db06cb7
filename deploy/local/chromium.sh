#!/usr/bin/env bash
# Installs a headless-capable Chromium for the report test of `seckill-bench sale`
# (tools/internal/benchsale/report_test.go renders report.html with it).
#
#   deploy/local/chromium.sh     idempotent: does nothing when `chromium` is already on PATH
#
# Needs root (or a chromium already installed) and apt-get; prints what to run otherwise.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium.sh: chromium is missing and apt-get is not available: install Chromium by hand" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "chromium.sh: chromium is missing; install it as root: sudo apt-get install -y chromium" >&2
	exit 1
fi
# Refresh the package lists only when they do not know the package yet.
if ! apt-cache show chromium >/dev/null 2>&1; then
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1 || {
	echo "chromium.sh: apt-get installed chromium but it is not on PATH" >&2
	exit 1
}
