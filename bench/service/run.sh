#!/usr/bin/env bash
# Service figures for BENCHMARKS.md: sluice serve in memory, loaded by
# sluice bench on the same machine (loopback), HTTP/JSON and gRPC, at 1, 16
# and 64 concurrent clients, 1000 keys. Usage: bench/service/run.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-10}
go build -o /tmp/sluice-bench-bin ./cmd/sluice
bin=/tmp/sluice-bench-bin
$bin serve --config bench/service/policy.yaml --http 127.0.0.1:18090 2>/dev/null &
http_pid=$!
$bin serve --envoy-config bench/service/envoy --grpc 127.0.0.1:18091 --http 127.0.0.1:18092 2>/dev/null &
grpc_pid=$!
trap 'kill $http_pid $grpc_pid 2>/dev/null' EXIT
sleep 1
for c in 1 16 64; do
	echo "== HTTP/JSON, $c clients"
	$bin bench --target http://127.0.0.1:18090 --duration "${secs}s" --concurrency "$c" --keys 1000 2>/dev/null
	echo "== gRPC, $c clients"
	$bin bench --grpc --target 127.0.0.1:18091 --duration "${secs}s" --concurrency "$c" --keys 1000 2>/dev/null
done
