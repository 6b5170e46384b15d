#!/bin/sh
# Installs what `make test` and `make bench` need on a fresh Debian machine, then the
# Go modules. Idempotent: does nothing that is already done.
set -eu
need=""
command -v bwrap >/dev/null 2>&1 || need="$need bubblewrap"
command -v protoc >/dev/null 2>&1 || need="$need protobuf-compiler"
[ -e /usr/include/google/protobuf/timestamp.proto ] || need="$need libprotobuf-dev"
command -v python3 >/dev/null 2>&1 || need="$need python3"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
command -v ps >/dev/null 2>&1 || need="$need procps"
# The native backend's disk quotas (a btrfs pool per data dir).
command -v mkfs.btrfs >/dev/null 2>&1 || need="$need btrfs-progs"
command -v strace >/dev/null 2>&1 || need="$need strace"
# The git tools and the local backend's git staging jail, tested with real git.
command -v git >/dev/null 2>&1 || need="$need git"
# The agent tools' real programs inside sandboxes (which see the host's /usr):
# headless Chromium for browser_open, matplotlib for repl_execute's figures.
command -v chromium-headless-shell >/dev/null 2>&1 || need="$need chromium-headless-shell"
/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || need="$need python3-matplotlib"
# The JavaScript tools of the tests (the OpenAPI linter, the MCP and E2B SDKs).
command -v npm >/dev/null 2>&1 || need="$need npm"
if [ -n "$need" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: need root to install:$need" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
go mod download
# The JavaScript tools the tests drive sbx with (test/node/package-lock.json).
(cd "$(dirname "$0")/../test/node" && npm ci --no-audit --no-fund --loglevel=error)
# The TypeScript SDK's pinned compiler and test packages (sdk/typescript/package-lock.json).
(cd "$(dirname "$0")/../sdk/typescript" && npm ci --no-audit --no-fund --loglevel=error)
