#!/usr/bin/env bash
# Checks that the library is lean: a module that imports only the library
# packages (sluice, bucket, window, quota, gate, httplimit, policy,
# limiter, overrides, store, store/memstore, tracing) has in its module graph (go mod graph)
# no gRPC, Envoy protos, Redis client, OpenTelemetry, plotting or CLI
# library (the tracing package is a hook of its own). The
# consumer module is made in a temporary directory, requiring this
# repository's root module by a replace directive.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
cat > go.mod <<MOD
module example.com/consumer

go 1.26.0

require github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000

replace github.com/sluicehq/sluice => $root
MOD
cat > main.go <<'GO'
package main

import (
	_ "github.com/sluicehq/sluice"
	_ "github.com/sluicehq/sluice/bucket"
	_ "github.com/sluicehq/sluice/gate"
	_ "github.com/sluicehq/sluice/httplimit"
	_ "github.com/sluicehq/sluice/limiter"
	_ "github.com/sluicehq/sluice/overrides"
	_ "github.com/sluicehq/sluice/policy"
	_ "github.com/sluicehq/sluice/quota"
	_ "github.com/sluicehq/sluice/store"
	_ "github.com/sluicehq/sluice/store/memstore"
	_ "github.com/sluicehq/sluice/tracing"
	_ "github.com/sluicehq/sluice/window"
)

func main() {}
GO
export GOWORK=off
GOFLAGS=-mod=mod go mod tidy
go build ./...
mods=$(go mod graph | awk '{print $2}' | sed 's/@.*//' | grep -vx 'go\|toolchain' | sort -u)
heavy='google.golang.org/grpc|envoyproxy|redis|rueidis|gonum|kong|progressbar|opentelemetry'
if bad=$(echo "$mods" | grep -E "$heavy"); then
	echo "lean-check: the library's module graph holds service dependencies:" >&2
	echo "$bad" >&2
	exit 1
fi
echo "lean-check: a library consumer's module graph has $(echo "$mods" | wc -l) modules, none matching ${heavy}: $(echo $mods)"
