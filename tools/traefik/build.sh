#!/usr/bin/env bash
# Builds Traefik from its Go module, once per machine, for docs/proxies.md's
# forwardAuth recipe (cmd/sluice TestForwardAuthTraefik), and prints the
# binary's path. `go install …@version` refuses Traefik's module (its go.mod
# has replace directives), so the module is downloaded through the Go module
# proxy and built inside a writable copy of it, with Traefik's own go.sum.
# v3.6.12 builds from the proxy's zip; the v3.7 zips lack a nested module.
#
# The binary is cached under ${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/sluice}/traefik-<version>/
# keyed by version: a later run on the same machine reuses it (a cold build is
# ~750 s of CPU). Delete that directory to rebuild.
set -euo pipefail

TRAEFIK_VERSION=v3.6.12
cache=${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/traefik-${TRAEFIK_VERSION}
bin=$cache/traefik

if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "${TRAEFIK_VERSION#v}"; then
	echo "$bin"
	exit 0
fi

dir=$(cd / && GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/traefik/traefik/v3@${TRAEFIK_VERSION}" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "tools/traefik: go mod download gave no module directory" >&2; exit 1; }
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -R "$dir/." "$work/src"
chmod -R u+w "$work/src"
# Without optimisations, inlining or DWARF (-N -l -dwarf=false; -w drops
# DWARF at link anyway): a test binary, and about 35 %
# less CPU to build.
(cd "$work/src" && GOWORK=off CGO_ENABLED=0 go build -trimpath -gcflags "all=-N -l -dwarf=false" \
	-ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=${TRAEFIK_VERSION}" \
	-o "$work/traefik" ./cmd/traefik) >&2
mv -f "$work/traefik" "$bin"
echo "$bin"
