#!/usr/bin/env bash
# Instructions Redis executes per call of sluice's decision code, counted by
# valgrind's callgrind (repeatable, unlike times on a shared VM): each
# variant runs against a redis-server of its own under callgrind, 200 and
# then 1200 times, and the difference over 1000 calls is printed.
#
# Usage: bench/redis-instructions.sh [variant ...]
# Variants: none (PING), envoy (INCRBY + EXPIRE pipelined: envoyproxy/ratelimit's work per
# descriptor), empty (an empty EVALSHA), take1 (one decision, one
# call), batchN (N decisions of N keys in one call), loop:<piece> (1000 runs
# of a piece of the double path in one call: fbucket, fV, fwait, pack,
# unpack, format, nothing), upto:<line> (take's script cut before a line).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
bin=$(mktemp -d)/redisstore.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -tags probe -c -o "$bin" ./store/redisstore/
run() {
	local v=$1 n=$2 port out
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	out=$(dirname "$bin")/cg.out
	rm -f "$out"
	valgrind --tool=callgrind --callgrind-out-file="$out" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
	local pid=$!
	for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
	PROBE_ADDR=127.0.0.1:$port VARIANT=$v N=$n "$bin" -test.run TestProbeVariant >/dev/null
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$pid" 2>/dev/null || true
	grep -E "^(summary|totals):" "$out" | head -1 | awk '{print $2}'
}
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(none empty take1 batch1 batch8 batch32)
for v in "${variants[@]}"; do
	a=$(run "$v" 200)
	b=$(run "$v" 1200)
	printf '%-24s %8d instructions per call\n' "$v" $(((b - a) / 1000))
done
