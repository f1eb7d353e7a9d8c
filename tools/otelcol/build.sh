#!/usr/bin/env bash
# Builds an OpenTelemetry Collector (OTLP receiver, file exporter) from its
# Go modules with the Collector Builder, once per machine, for cmd/sluice's
# trace tests (TestOTel*), and prints the binary's path.
#
# The module proxy serves no command of the core distribution, so the
# builder (go.opentelemetry.io/collector/cmd/builder, same version as the
# components in manifest.yaml) generates the sources and go.mod; its own
# `go mod tidy` step then fails (the module proxy refuses a test-only
# dependency of the file exporter, otlpencodingextension), so it runs with
# --skip-compilation, its failure is accepted once go.mod is written, and a
# plain `go build -mod=mod` (which resolves only what the build imports)
# compiles the sources. About 150 s cold.
#
# Cached under ${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/sluice}/otelcol-<version>-<digest>/,
# the digest that of manifest.yaml and this script: a later run on the
# same machine reuses it, and any change to them builds anew. Delete that
# directory to rebuild.
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd)

version=$(sed -n 's/^  version: \(.*\)$/\1/p' manifest.yaml)
digest=$(cat manifest.yaml build.sh | sha256sum | cut -c1-12)
cache=${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/otelcol-${version}-${digest}
bin=$cache/otelcol-sluice

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export GOWORK=off GOFLAGS=-mod=mod
GOBIN=$tmp/bin go install "go.opentelemetry.io/collector/cmd/builder@v${version}" >&2
sed "s#output_path: ./_build#output_path: $tmp/src#" manifest.yaml >"$tmp/manifest.yaml"
"$tmp/bin/builder" --config "$tmp/manifest.yaml" --skip-compilation >&2 ||
	[ -s "$tmp/src/go.mod" ] || { echo "otelcol: the builder wrote no go.mod" >&2; exit 1; }
cd "$tmp/src"
# Without optimisations, inlining or DWARF (-N -l -dwarf=false): a test
# binary, and less CPU to build.
go build -trimpath -gcflags "all=-N -l -dwarf=false" -ldflags "-s -w" -o "$tmp/otelcol-sluice" . >&2
mv -f "$tmp/otelcol-sluice" "$bin"
cd "$here"
echo "$bin"
