#!/usr/bin/env bash
# Builds Caddy from its Go module (this directory: main.go, go.mod, go.sum),
# once per machine, for docs/proxies.md's forward_auth recipe (cmd/sluice
# TestForwardAuthCaddy), and prints the binary's path.
#
# The binary is cached under ${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/sluice}/caddy-<version>-<digest>/,
# the digest that of this directory's go.mod, go.sum and main.go: a later
# run on the same machine reuses it, and any change to them builds anew.
# Delete that directory to rebuild.
set -euo pipefail
cd "$(dirname "$0")"

version=$(sed -n 's/^require github.com\/caddyserver\/caddy\/v2 \(v[^ ]*\)$/\1/p' go.mod)
digest=$(cat go.mod go.sum main.go | sha256sum | cut -c1-12)
cache=${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/caddy-${version}-${digest}
bin=$cache/caddy

if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Without optimisations, inlining or DWARF (-N -l -dwarf=false; -w drops
# DWARF at link anyway): a test binary, and about 35 %
# less CPU to build.
GOWORK=off go build -trimpath -gcflags "all=-N -l -dwarf=false" -ldflags "-s -w" -o "$tmp/caddy" . >&2
mv -f "$tmp/caddy" "$bin"
echo "$bin"
