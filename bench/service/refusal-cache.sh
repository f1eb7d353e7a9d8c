#!/usr/bin/env bash
# The refusal cache (sluice serve --refusal-cache, store/refusal) measured on
# Redis: a flood 10x over a limit on 100 keys from 64 clients (sluice bench,
# loopback), once with the cache off (--refusal-cache 0) and once on (the
# default), each against a fresh sluice serve on a fresh Redis of its own;
# over HTTP/JSON (POST /v1/check, a policy) and over gRPC (Envoy's
# RateLimitService, an Envoy configuration). Prints per run the decisions,
# the decision scripts Redis ran (INFO commandstats: FCALL), its other script
# calls (EVALSHA: over HTTP the admissions' receipt records, a batch a call),
# all its commands (scripts' commands, receipt records, the overrides' poll
# and probes included) and its CPU (INFO cpu: used_cpu_user +
# used_cpu_sys) over the run, then the figures of issue 27: Redis commands
# per refused decision, Redis CPU per decision (cache on over cache off),
# and the admitted counts side by side with B + r*t.
#
# The limit is set from a calibration run (cache off, a limit that refuses
# every request): r per key = (refusals/s) / (100 keys * 10), so that the
# cache-off flood is 10x over it (the cache-on flood, being faster, more).
#
# Usage: bench/service/refusal-cache.sh [seconds per run, default 10, at most 30] [http|grpc|both]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-10}
if [ "$secs" -gt 30 ]; then secs=30; fi
modes=${2:-both}
keys=100
clients=64
work=$(mktemp -d)
bin=$work/sluice
go build -o "$bin" ./cmd/sluice
# stop_all stops the redis-servers and sluice serves started so far (their
# pids are kept in a file: they are started in command substitutions,
# whose variables do not reach this shell) and waits for them to exit.
stop_all() {
	local p
	[ -f "$work/pids" ] || return 0
	while read -r p; do kill "$p" 2>/dev/null || true; done <"$work/pids"
	for _ in $(seq 50); do
		local alive=0
		while read -r p; do if kill -0 "$p" 2>/dev/null && ! grep -q zombie "/proc/$p/status" 2>/dev/null; then alive=1; fi; done <"$work/pids"
		[ "$alive" = 0 ] && break
		sleep 0.1
	done
	: >"$work/pids"
}
cleanup() {
	stop_all
	rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# redis_start starts a redis-server of its own on a free port (no
# persistence) and prints the port.
redis_start() {
	local port
	port=$(freeport)
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis-$port.log" 2>&1 &
	echo $! >>"$work/pids"
	for _ in $(seq 50); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	echo "$port"
}

# serve_start MODE CONFIG REDISPORT EXTRA... starts sluice serve (http: a
# policy file; grpc: an Envoy configuration directory) and prints the
# bench target.
serve_start() {
	local mode=$1 cfg=$2 rport=$3 port gport
	shift 3
	port=$(freeport)
	if [ "$mode" = http ]; then
		"$bin" serve --config "$cfg" --http "127.0.0.1:$port" --store "redis://127.0.0.1:$rport" --log-level warn "$@" >"$work/serve-$port.log" 2>&1 &
	else
		gport=$(freeport)
		"$bin" serve --envoy-config "$cfg" --grpc "127.0.0.1:$gport" --http "127.0.0.1:$port" --store "redis://127.0.0.1:$rport" --log-level warn "$@" >"$work/serve-$port.log" 2>&1 &
	fi
	echo $! >>"$work/pids"
	echo "127.0.0.1:$port" >"$work/http"
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	if [ "$mode" = http ]; then echo "http://127.0.0.1:$port"; else echo "127.0.0.1:$gport"; fi
}

commands() { # total calls in INFO commandstats, less INFO's own
	redis-cli -p "$1" info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" {n += $3} END {print n+0}'
}
scripts() { # FCALL calls: the decisions that reached Redis
	redis-cli -p "$1" info commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_fcall" {n += $3} END {print n+0}'
}
evalsha() { # EVALSHA calls: on a single Redis, the receipt records' script calls (each writing a batch)
	redis-cli -p "$1" info commandstats | tr -d '\r' | awk -F'[:=,]' '$1 == "cmdstat_evalsha" {n += $3} END {print n+0}'
}
cpu() { # used_cpu_user + used_cpu_sys, seconds
	redis-cli -p "$1" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f\n", s}'
}

# run MODE NAME CONFIG EXTRA...: one flood; sets R_REQ R_ADM R_REF R_CMD
# R_FC R_EV R_CPU R_SECS R_HITS R_DOWN.
run() {
	local mode=$1 name=$2 cfg=$3
	shift 3
	local rport target c0 f0 e0 u0 out flags
	rport=$(redis_start)
	target=$(serve_start "$mode" "$cfg" "$rport" "$@")
	flags=(--target "$target" --duration "${secs}s" --concurrency $clients --keys $keys)
	if [ "$mode" = grpc ]; then flags+=(--grpc); fi
	c0=$(commands "$rport")
	f0=$(scripts "$rport")
	e0=$(evalsha "$rport")
	u0=$(cpu "$rport")
	out=$("$bin" bench "${flags[@]}" 2>/dev/null)
	R_CMD=$(($(commands "$rport") - c0))
	R_FC=$(($(scripts "$rport") - f0))
	R_EV=$(($(evalsha "$rport") - e0))
	R_CPU=$(python3 -c "print($(cpu "$rport") - $u0)")
	R_REQ=$(sed -n 's/.*(requests \([0-9]*\):.*/\1/p' <<<"$out")
	R_ADM=$(sed -n 's/.*admitted \([0-9]*\),.*/\1/p' <<<"$out")
	R_REF=$(sed -n 's/.*refused \([0-9]*\),.*/\1/p' <<<"$out")
	R_SECS=$(sed -n 's/.*keys, \([0-9.]*\)s$/\1/p' <<<"$out" | head -1)
	R_HITS=$(curl -s "http://$(cat "$work/http")/metrics" | awk '/^sluice_refusal_cache_hits_total/ {n += $2} END {printf "%d\n", n}')
	# (a store call past the timeout, 250 ms, fails over: its decisions are
	# on_store_error's, not Redis's, and the admitted counts are off)
	R_DOWN=$(grep -c 'store unreachable' "$work/serve-$(cat "$work/http" | sed 's/.*://').log" || true)
	echo "== $mode, $name ($*)"
	echo "$out"
	printf 'redis: %d decision scripts (FCALL, each deciding a batch), %d other scripts (EVALSHA: receipt records, each writing a batch), %d commands, %.3f CPU-s over the run; %d refusals from the cache\n' "$R_FC" "$R_EV" "$R_CMD" "$R_CPU" "$R_HITS"
	if [ "$R_DOWN" -gt 0 ]; then echo "WARNING: $R_DOWN failovers (store unreachable: a call past the store timeout) in this run: its figures are not Redis's alone"; fi
	# (this run's processes stop here: the next run has the CPU to itself)
	stop_all
}

# config MODE B R: a limit of capacity B refilled at R a second per key.
config() {
	local mode=$1 b=$2 r=$3 d
	if [ "$mode" = http ]; then
		d=$work/policy-$b-$r.yaml
		printf 'limits:\n  - name: tenant\n    key: "tenant:{tenant}"\n    capacity: %s\n    refill_per_second: %s\n' "$b" "$r" >"$d"
	else
		# (Envoy's limits are N per unit: the bucket holds N, refilled at N a unit)
		d=$work/envoy-$b-$r
		mkdir -p "$d"
		if [ "$r" = slow ]; then
			printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_key, unit: day, requests_per_unit: 1}\n' >"$d/edge.yaml"
		else
			printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per_key, unit: second, requests_per_unit: %s}\n' "$r" >"$d/edge.yaml"
		fi
	fi
	echo "$d"
}

flood() {
	local mode=$1 cal rate burst cfg
	# Calibration: every request refused (after each key's first), cache off.
	if [ "$mode" = http ]; then cal=$(config http 1 0.000001); else cal=$(config grpc 1 slow); fi
	run "$mode" calibration "$cal" --refusal-cache 0
	local cal_cmd=$R_CMD cal_req=$R_REQ cal_cpu=$R_CPU
	rate=$(python3 -c "print(max(1, round($R_REF / $R_SECS / ($keys * 10))))")
	burst=$rate
	cfg=$(config "$mode" "$burst" "$rate")
	echo "== $mode: the limit: capacity $burst, refill $rate/s per key, $keys keys (calibration, cache off, every request refused: $R_REF refusals in ${R_SECS}s)"
	run "$mode" "cache off" "$cfg" --refusal-cache 0
	local off=("$R_REQ" "$R_ADM" "$R_REF" "$R_CMD" "$R_HITS" "$R_CPU" "$R_SECS") off_ev=$R_EV
	run "$mode" "cache on" "$cfg"
	local on=("$R_REQ" "$R_ADM" "$R_REF" "$R_CMD" "$R_HITS" "$R_CPU" "$R_SECS") on_ev=$R_EV
	python3 - "$mode" "${off[@]}" "${on[@]}" "$burst" "$rate" "$keys" "$cal_cmd" "$cal_req" "$cal_cpu" "$off_ev" "$on_ev" <<'PY'
import sys
mode = sys.argv[1]
v = list(map(float, sys.argv[2:]))
off_req, off_adm, off_ref, off_cmd, off_hits, off_cpu, off_t = v[0:7]
on_req, on_adm, on_ref, on_cmd, on_hits, on_cpu, on_t = v[7:14]
b, r, keys, cal_cmd, cal_req, cal_cpu, off_ev, on_ev = v[14:22]
# The refused decisions that reached Redis: all of them with the cache
# off; those the cache did not answer (its hits, from /metrics) with it on.
# Each costs Redis what one cost in the calibration run (all refusals,
# cache off: its commands, the scripts' own and the background's, per
# decision); the rest of a run's commands and CPU is its admissions', each
# Redis's with the cache or without.
c_ref, cpu_ref = cal_cmd / cal_req, cal_cpu / cal_req
reach_on = on_ref - on_hits
c_adm = (off_cmd - off_ref * c_ref) / off_adm
cpu_adm = (off_cpu - off_ref * cpu_ref) / off_adm
print()
print(f"== {mode}: figures")
print(f"offered load over the limit (decisions/s over keys * r): cache off {off_req / off_t / (keys * r):.1f}x, cache on {on_req / on_t / (keys * r):.1f}x")
print(f"refused decisions reaching Redis: cache off all {off_ref:.0f}, cache on {reach_on:.0f} of {on_ref:.0f} ({reach_on / on_ref:.4f}; the cache answered {on_hits:.0f})")
print(f"Redis commands per refused decision (INFO commandstats; {c_ref:.3f} per refusal reaching Redis): cache off {c_ref:.3f}, "
      f"cache on {reach_on * c_ref / on_ref:.4f} (target <= 0.05)")
print(f"  as measured, cache on: its commands less its admissions' ({c_adm:.2f} each, from the cache-off run): {max(on_cmd - on_adm * c_adm, 0) / on_ref:.4f} per refused decision")
if off_ev > 0 and on_ev > 0:  # (over HTTP: the admissions' receipt records, a batch a script call)
    print(f"  admissions per EVALSHA (receipt records per script call): cache off {off_adm / off_ev:.2f}, cache on {on_adm / on_ev:.2f}")
print(f"Redis commands per decision, all of them: cache off {off_cmd / off_req:.3f}, cache on {on_cmd / on_req:.3f}")
print(f"Redis CPU per decision (INFO cpu): cache off {off_cpu / off_req * 1e6:.3f} us, cache on {on_cpu / on_req * 1e6:.3f} us: "
      f"ratio {on_cpu / on_req / (off_cpu / off_req):.3f} (target <= 0.2)")
print(f"  floor with no refusal reaching Redis: the admissions' CPU alone ({cpu_adm * 1e6:.1f} us each against {cpu_ref * 1e6:.1f} us a refusal): "
      f"ratio {on_adm * cpu_adm / on_req / (off_cpu / off_req):.3f}")
print(f"admitted: cache off {off_adm:.0f}, cache on {on_adm:.0f}: differ by {abs(on_adm - off_adm):.0f} ({abs(on_adm - off_adm) / keys:.2f} per key); "
      f"per key {off_adm / keys:.2f} and {on_adm / keys:.2f}, B + r*t {b + r * off_t:.1f} and {b + r * on_t:.1f}")
PY
}

case $modes in
http | grpc) flood "$modes" ;;
*) flood http && flood grpc ;;
esac
