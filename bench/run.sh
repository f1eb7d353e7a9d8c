#!/usr/bin/env bash
# Runs the comparison benchmarks COUNT times (default 6), one pass of every
# benchmark per round so that slow drifts of this shared machine hit every
# implementation alike, then summarises them with benchstat, one column per
# implementation. Usage: ./run.sh [regexp] (default: all). Output:
# results/$OUT.txt and .benchstat (OUT default "bench"); an OUT that is a
# path (absolute, or containing a slash) is used as given, .txt added.
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off # bench/ is a module outside the workspace (see go.work)
pattern=${1:-.}
count=${COUNT:-6}
case "${OUT:-bench}" in
*/*) out=${OUT%.txt}.txt ;;
*) out=results/${OUT:-bench}.txt ;;
esac
mkdir -p "$(dirname "$out")"
export PATH="$(go env GOPATH)/bin:$PATH"
command -v benchstat >/dev/null || go install golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
: >"$out"
for i in $(seq "$count"); do
	go test -run '^$' -bench "$pattern" -count 1 . | tee -a "$out" >/dev/null
	echo "round $i/$count done" >&2
done
benchstat -col /impl "$out" | tee "${out%.txt}.benchstat"
