#!/usr/bin/env bash
# Provides shellcheck for `make lint` (Debian's package) and prints its path on stdout.
#
#   deploy/local/shellcheck.sh     idempotent; installs the package as root when it is missing
set -euo pipefail

if ! command -v shellcheck >/dev/null 2>&1; then
	if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
		echo "shellcheck.sh: shellcheck is missing; install it (Debian: sudo apt-get install -y shellcheck)" >&2
		exit 1
	fi
	# Refresh the package lists only when they do not know the package yet.
	if ! apt-cache show shellcheck >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
fi
command -v shellcheck
