#!/usr/bin/env bash
# Provides golangci-lint for `make lint`: builds the pinned version once from the Go module proxy into the
# tools cache (${SECKILL_CACHE_DIR:-$HOME/.cache/seckill}/tools) and prints its path on stdout.
#
#   deploy/local/golangci-lint.sh     idempotent; every message goes to stderr
set -euo pipefail

VERSION=v2.15.0
CACHE_DIR=${SECKILL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/seckill}
DIR=$CACHE_DIR/tools/golangci-lint-${VERSION#v}
BIN=$DIR/golangci-lint

if [ ! -x "$BIN" ]; then
	command -v go >/dev/null 2>&1 || {
		echo "golangci-lint.sh: go is needed to build golangci-lint $VERSION" >&2
		exit 1
	}
	echo "golangci-lint.sh: building golangci-lint $VERSION from the Go module proxy (once; a minute or two)" >&2
	mkdir -p "$DIR"
	# Built outside the repository so that its dependencies never touch this module's go.mod.
	(cd "$DIR" && GOFLAGS='' GOBIN="$DIR" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION") >&2
fi
printf '%s\n' "$BIN"
