#!/usr/bin/env bash
# Instructions per op of benchmarks of this module, counted by valgrind's
# callgrind: repeatable whatever else the machine does (times on a shared
# 2-vCPU VM swing by tens of percent from one run to the next). Each
# benchmark runs N/5 and then N times (-benchtime Nx, GOMAXPROCS=1, Go's
# asynchronous preemption off, which callgrind cannot follow); the
# difference over 4N/5 ops is printed. Serial benchmarks only: parallel ones
# measure contention, which instruction counts do not see.
#
# Usage: bench/instructions.sh [regexp ...]   (default: the Check rows)
# Env: N (default 50000).
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off # bench/ is a module outside the workspace (see go.work)
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
n=${N:-50000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/bench.test" .
count() {
	rm -f "$dir/cg.out"
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
		"$dir/bench.test" -test.run '^$' -test.bench "$1" -test.benchtime "${2}x" -test.count 1 >/dev/null 2>&1
	grep -E "^(summary|totals):" "$dir/cg.out" | head -1 | awk '{print $2}'
}
patterns=("$@")
if [ ${#patterns[@]} -eq 0 ]; then
	for limits in 1 3; do
		for keys in 1 1000000; do
			for impl in sluice xrate golimiter floor; do
				patterns+=("Check/^limits=$limits\$/^keys=$keys\$/^serial\$/^impl=$impl\$")
			done
		done
	done
fi
for p in "${patterns[@]}"; do
	a=$(count "$p" $((n / 5)))
	b=$(count "$p" "$n")
	printf '%-60s %8d instructions/op\n' "$p" $(((b - a) / (n - n / 5)))
done
