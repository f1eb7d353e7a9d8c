#!/usr/bin/env bash
# sluice serve vs envoyproxy/ratelimit, the reference Envoy rate limit
# service: the same Envoy configuration (bench/service/envoycmp/config/), each
# server on a redis-server of its own, both driven over gRPC by
# `sluice bench --grpc` in alternating rounds.
#
#   bench/service/envoy-compare.sh          # ROUNDS=5 SECONDS=5
#   ROUNDS=3 SECONDS=5 bench/service/envoy-compare.sh
#
# Rows: 1, 16 and 64 clients x one hot key and 10,000 keys x units second,
# minute and hour (descriptor keys per_* on 10,000 values, hot_* on one
# value; limits never reached, so every request is a full decision). A third
# server, sluice with --lease-tokens on a redis-server of its own, is a row
# set of its own (against the same rounds of envoy), on the hot key and on
# 10,000 keys; so is a fourth, sluice in memory (no --store: its state in
# the process, as one instance deployed alone keeps it). With FLOOR=1 a
# fifth, bench/service/floor, answers OK without deciding anything (sluice
# serve's gRPC server options, an empty handler): the ceiling of any
# grpc-go RateLimitService under this load on this machine, its ratio to
# envoy the most any grpc-go server can reach here. Within a
# configuration the servers take turns, round after round, the order reversed
# every other round (sluice, envoy, then envoy, sluice, ...).
#
# Each run reports decisions/s and p99 (from sluice bench), the server's CPU
# per decision (utime+stime of /proc/PID/stat before and after the run) and
# its Redis's CPU per decision (INFO cpu used_cpu_user+used_cpu_sys, before
# and after; 0 in memory), in microseconds, and on its raw line the load
# generator's (client_cpu_us/dec: sluice bench's user+sys from
# /usr/bin/time, -1 without it). The tables give each round's figures with the
# ratio sluice/envoy (above 1 is better for decisions/s, below 1 for p99 and
# CPU), then a summary of medians over the rounds (the ratio column there is
# the median of the rounds' ratios).
#
# Both servers run with their defaults but for addresses, log level (warn)
# and these: sluice serve --reload 0 (the config is not polled);
# envoyproxy/ratelimit with DISABLE_STATS=true (USE_STATSD=false alone sends
# its stats to a logging sink, a line on stderr per request); its Redis
# client keeps its defaults: REDIS_POOL_SIZE 10, no write buffering
# (REDIS_PIPELINE_WINDOW 0; see ENVOY_REDIS_PIPELINE_WINDOW below).
#
# The figures are relative, not capacities: on this 2-core machine the two
# cores are shared by the server under load, its redis-server and the load
# generator (and the idle other servers, and whatever else runs on the
# machine: each raw line records the load average, which counts this run's
# own processes too), so every figure includes their contention for the
# cores.
#
# Environment (all optional):
#   ROUNDS=5 SECONDS=5        rounds per configuration, seconds per run
#   CLIENTS="1 16 64" KEYS="1 10000" UNITS="second minute hour"
#   LEASE=1                   0: no --lease-tokens row set
#   MEMORY=1                  0: no in-memory row set
#   FLOOR=0                   1: an empty-handler row set (bench/service/floor)
#   WARMUP=1                  seconds of load per server and configuration
#                             before its rounds (0: none)
#   OUT=bench/results/envoy-compare.txt
#                             raw per-round lines and the tables
#   ENVOY_REDIS_PIPELINE_WINDOW  passed to envoyproxy/ratelimit as
#                             REDIS_PIPELINE_WINDOW (unset: its default, 0)
#   ENVOYCMP_CACHE            where envoyproxy/ratelimit is built
#                             (default: sluice-envoycmp beside $(go env GOCACHE))
#   ENVOYCMP_GOTOOLCHAIN      GOTOOLCHAIN for that build only (default local)
#
# Needs go, redis-server and redis-cli. Everything listens on free ports of
# 127.0.0.1 only; every process started here is stopped at exit. Nothing of
# envoyproxy/ratelimit is in this repository: it is built from its Go module
# at the version pinned below, into the cache directory.
set -euo pipefail

ENVOY_MODULE=github.com/envoyproxy/ratelimit
ENVOY_VERSION=v1.4.1-0.20260122083618-3fb702589d36

ROUNDS=${ROUNDS:-5}
# SECONDS is bash's clock (seconds since the shell started): what the
# caller set is read from the environment the script was given.
SECONDS_PER_RUN=$(printenv SECONDS || true)
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CLIENTS=${CLIENTS:-1 16 64}
KEYS=${KEYS:-1 10000}
UNITS=${UNITS:-second minute hour}
LEASE=${LEASE:-1}
MEMORY=${MEMORY:-1}
FLOOR=${FLOOR:-0}
WARMUP=${WARMUP:-1}

die() { echo "envoy-compare: $*" >&2; exit 1; }
in_range() { [[ $1 =~ ^(0|[1-9][0-9]{0,8})$ ]] && (($1 >= $2 && $1 <= $3)); } # N LO HI
in_range "$ROUNDS" 1 1000 || die "ROUNDS=$ROUNDS: want a whole number, 1 to 1000"
in_range "$SECONDS_PER_RUN" 1 600 || die "SECONDS=$SECONDS_PER_RUN: want a whole number of seconds, 1 to 600"
in_range "$WARMUP" 0 600 || die "WARMUP=$WARMUP: want a whole number of seconds, 0 to 600"
[[ $LEASE == 0 || $LEASE == 1 ]] || die "LEASE=$LEASE: want 0 or 1"
[[ $MEMORY == 0 || $MEMORY == 1 ]] || die "MEMORY=$MEMORY: want 0 or 1"
[[ $FLOOR == 0 || $FLOOR == 1 ]] || die "FLOOR=$FLOOR: want 0 or 1"
for c in $CLIENTS; do in_range "$c" 1 4096 || die "CLIENTS: $c is not a whole number, 1 to 4096"; done
for k in $KEYS; do [[ $k == 1 || $k == 10000 ]] || die "KEYS: $k is not 1 or 10000"; done
for u in $UNITS; do [[ $u == second || $u == minute || $u == hour ]] || die "UNITS: $u is not second, minute or hour"; done
[[ -n $CLIENTS && -n $KEYS && -n $UNITS ]] || die "CLIENTS, KEYS and UNITS must each name at least one"
for tool in go redis-server redis-cli ss; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done

cd "$(dirname "$0")/../.."
repo=$(pwd)
conf_dir=$repo/bench/service/envoycmp/config
[[ -f $conf_dir/envoycmp.yaml ]] || die "missing $conf_dir/envoycmp.yaml"
OUT=${OUT:-bench/results/envoy-compare.txt}
mkdir -p "$(dirname "$OUT")"

tmp=$(mktemp -d /tmp/sluice-envoycmp.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- builds -----------------------------------------------------------------
echo "building sluice ..." >&2
go build -o "$tmp/sluice" ./cmd/sluice
sluice=$tmp/sluice
if [[ $FLOOR == 1 ]]; then
	echo "building bench/service/floor ..." >&2
	(cd bench && GOWORK=off go build -o "$tmp/floor" ./service/floor)
fi

cache=${ENVOYCMP_CACHE:-$(dirname "$(go env GOCACHE)")/sluice-envoycmp}
envoy=$cache/ratelimit-$ENVOY_VERSION/service_cmd
if [[ ! -x $envoy ]]; then
	echo "building $ENVOY_MODULE@$ENVOY_VERSION (once, into $cache) ..." >&2
	mkdir -p "$cache/ratelimit-$ENVOY_VERSION"
	(cd "$cache" && GOTOOLCHAIN=${ENVOYCMP_GOTOOLCHAIN:-local} GOFLAGS=-mod=mod \
		GOBIN="$cache/ratelimit-$ENVOY_VERSION" go install "$ENVOY_MODULE/src/service_cmd@$ENVOY_VERSION") ||
		die "building $ENVOY_MODULE failed (its go.mod may need a newer Go: see ENVOYCMP_GOTOOLCHAIN)"
fi

# --- ports and processes ------------------------------------------------------
used_ports=" "
free_port() { # VAR: set VAR to a loopback port no socket uses, nor given before
	local _fp
	while :; do
		_fp=$((20000 + RANDOM % 40000))
		[[ $used_ports == *" $_fp "* ]] && continue
		[[ -z $(ss -Htan "sport = :$_fp") ]] || continue
		used_ports+="$_fp "
		printf -v "$1" %s "$_fp"
		return
	done
}
wait_tcp() { # port name pid
	for _ in $(seq 1 200); do
		kill -0 "$3" 2>/dev/null || die "$2 exited at start; its log: $(tail -5 "$tmp/$2.log")"
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
		sleep 0.05
	done
	die "$2 does not listen on 127.0.0.1:$1 after 10 s; its log: $(tail -5 "$tmp/$2.log")"
}

impls="sluice envoy"
[[ $LEASE == 1 ]] && impls+=" sluice-lease"
[[ $MEMORY == 1 ]] && impls+=" sluice-memory"
[[ $FLOOR == 1 ]] && impls+=" floor"
declare -A redis_port server_pid grpc_port
for impl in $impls; do
	[[ $impl == sluice-memory || $impl == floor ]] && continue # no Redis
	free_port p
	mkdir -p "$tmp/redis-$impl"
	redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
		--dir "$tmp/redis-$impl" >"$tmp/redis-$impl.log" 2>&1 &
	pids+=($!)
	wait_tcp "$p" "redis-$impl" $!
	redis_port[$impl]=$p
done

start_sluice() { # impl, extra flags
	local impl=$1 g h store=()
	shift
	free_port g
	free_port h
	[[ -n ${redis_port[$impl]:-} ]] && store=(--store "redis://127.0.0.1:${redis_port[$impl]}")
	"$sluice" serve --envoy-config "$conf_dir" --grpc "127.0.0.1:$g" --http "127.0.0.1:$h" \
		"${store[@]}" --reload 0 --log-level warn "$@" >"$tmp/$impl.log" 2>&1 &
	pids+=($!)
	server_pid[$impl]=$!
	grpc_port[$impl]=$g
	wait_tcp "$g" "$impl" $!
}
start_sluice sluice
[[ $impls == *sluice-lease* ]] && start_sluice sluice-lease --lease-tokens
[[ $impls == *sluice-memory* ]] && start_sluice sluice-memory
if [[ $FLOOR == 1 ]]; then
	free_port g
	"$tmp/floor" -grpc "127.0.0.1:$g" >"$tmp/floor.log" 2>&1 &
	pids+=($!)
	server_pid[floor]=$!
	grpc_port[floor]=$g
	wait_tcp "$g" floor $!
fi

g='' h='' d=''
free_port g
free_port h
free_port d
# DISABLE_STATS: with USE_STATSD=false alone its stats go to a logging sink,
# one line on stderr per request.
env USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=warn BACKEND_TYPE=redis \
	REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:${redis_port[envoy]}" \
	${ENVOY_REDIS_PIPELINE_WINDOW:+REDIS_PIPELINE_WINDOW=$ENVOY_REDIS_PIPELINE_WINDOW} \
	RUNTIME_ROOT="$repo/bench/service" RUNTIME_SUBDIRECTORY=envoycmp RUNTIME_APPDIRECTORY=config \
	RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true \
	HOST=127.0.0.1 PORT="$h" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$d" GRPC_HOST=127.0.0.1 GRPC_PORT="$g" \
	"$envoy" >"$tmp/envoy.log" 2>&1 &
pids+=($!)
server_pid[envoy]=$!
grpc_port[envoy]=$g
wait_tcp "$g" envoy $!

# --- measuring ----------------------------------------------------------------
clk_tck=$(getconf CLK_TCK)
proc_cpu() { # pid -> CPU seconds (utime+stime) so far
	# Fields after the command name, which is in parentheses and may hold spaces.
	local s f
	s=$(<"/proc/$1/stat")
	read -ra f <<<"${s##*) }"
	echo "${f[11]} ${f[12]}" | awk -v t="$clk_tck" '{printf "%.6f", ($1 + $2) / t}'
}
redis_cpu() { # port -> CPU seconds (used_cpu_user+used_cpu_sys) so far; no port: 0
	[[ -n $1 ]] || { echo 0; return; }
	redis-cli -h 127.0.0.1 -p "$1" INFO cpu | tr -d '\r' |
		awk -F: '$1 == "used_cpu_user" || $1 == "used_cpu_sys" {s += $2} END {printf "%.6f", s}'
}
# bench impl key keys clients seconds [extra flags] -> sluice bench's output
bench() {
	local impl=$1 key=$2 keys=$3 c=$4 secs=$5
	shift 5
	local timer=()
	rm -f "$tmp/bench.time"
	[[ -x /usr/bin/time ]] && timer=(/usr/bin/time -f '%U %S' -o "$tmp/bench.time")
	"${timer[@]}" "$sluice" bench --grpc --target "127.0.0.1:${grpc_port[$impl]}" --domain envoycmp \
		--key "$key" --keys "$keys" --concurrency "$c" --duration "${secs}s" "$@" 2>"$tmp/bench.err" ||
		die "sluice bench against $impl failed: $(tail -3 "$tmp/bench.err")"
}
# counts "OUTPUT" -> "admitted refused errors"
counts() {
	sed -n 's/.*admitted \([0-9]*\), refused \([0-9]*\), errors \([0-9]*\).*/\1 \2 \3/p' <<<"$1"
}

# Sanity: the limit of 10 an hour gives 10 OK and 20 OVER_LIMIT out of 30
# requests sent one at a time, from every server.
for impl in $impls; do
	[[ $impl == floor ]] && continue # it decides nothing
	out=$(bench "$impl" sanity 1 1 10 --requests 30)
	read -r a r e <<<"$(counts "$out")"
	echo "sanity $impl: 30 requests at 10/hour: admitted $a, refused $r, errors $e" >&2
	[[ $a == 10 && $r == 20 && $e == 0 ]] ||
		die "sanity check failed for $impl (want admitted 10, refused 20, errors 0); its log: $(tail -5 "$tmp/$impl.log")"
done

raw=$tmp/raw.txt
: >"$raw"
{
	echo "# bench/service/envoy-compare.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; $(go version | cut -d' ' -f3-)"
	echo "# sluice $(git describe --always --dirty 2>/dev/null || echo '?'); $ENVOY_MODULE@$ENVOY_VERSION; $(redis-server --version | cut -d' ' -f1-3)"
	echo "# ROUNDS=$ROUNDS SECONDS=$SECONDS_PER_RUN CLIENTS=\"$CLIENTS\" KEYS=\"$KEYS\" UNITS=\"$UNITS\" LEASE=$LEASE MEMORY=$MEMORY FLOOR=$FLOOR WARMUP=$WARMUP${ENVOY_REDIS_PIPELINE_WINDOW:+ ENVOY_REDIS_PIPELINE_WINDOW=$ENVOY_REDIS_PIPELINE_WINDOW}"
	echo "# server_cpu, redis_cpu: microseconds of CPU per decision; p99 in microseconds;"
	echo "# load1: the machine's 1-minute load average at the end of the run (this run's own"
	echo "#   processes count there too: about 2-3 under load; more is other work on the machine)"
} >"$OUT"

# run round impl key keys clients: one measured run, one raw line
run() {
	local round=$1 impl=$2 key=$3 keys=$4 c=$5 pid=${server_pid[$2]} port=${redis_port[$2]:-}
	local s0 r0 s1 r1 out a r e dps p99
	s0=$(proc_cpu "$pid") r0=$(redis_cpu "$port")
	out=$(bench "$impl" "$key" "$keys" "$c" "$SECONDS_PER_RUN")
	s1=$(proc_cpu "$pid") r1=$(redis_cpu "$port")
	local lg=-1
	[[ -s $tmp/bench.time ]] && lg=$(awk 'END {print $1 + $2}' "$tmp/bench.time")
	read -r a r e <<<"$(counts "$out")"
	dps=$(sed -n 's/^decisions\/s \([0-9]*\).*/\1/p' <<<"$out")
	p99=$(sed -n 's/.* p99 \([^ ]*\) .*/\1/p' <<<"$out")
	[[ -n $a && -n $dps && -n $p99 ]] || die "unexpected sluice bench output: $out"
	awk -v round="$round" -v impl="$impl" -v keys="$keys" -v unit="${key#*_}" -v c="$c" \
		-v dps="$dps" -v a="$a" -v r="$r" -v e="$e" -v p99="$p99" \
		-v s0="$s0" -v s1="$s1" -v r0="$r0" -v r1="$r1" -v lg="$lg" -v lavg="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
		# p99 is a Go duration: 850.5µs, 1.234ms, 2.1s, 900ns.
		v = p99 + 0; u = p99; sub(/^[0-9.]+/, "", u)
		if (u == "ns") v /= 1000; else if (u == "ms") v *= 1000; else if (u == "s") v *= 1e6
		else if (u != "µs" && u != "us") { print "bad p99 " p99 > "/dev/stderr"; exit 1 }
		d = a + r
		printf "round=%d impl=%s keys=%d unit=%s clients=%d decisions/s=%d admitted=%d refused=%d errors=%d p99_us=%.1f server_cpu_us/dec=%.3f redis_cpu_us/dec=%.3f load1=%s client_cpu_us/dec=%.3f\n",
			round, impl, keys, unit, c, dps, a, r, e, v, (s1 - s0) * 1e6 / d, (r1 - r0) * 1e6 / d, lavg, lg < 0 ? -1 : lg * 1e6 / d
	}' | tee -a "$raw" >>"$OUT"
	echo "  $(tail -1 "$raw")" >&2
	((e == 0)) || echo "  anomaly: $e requests failed; the first: $(grep -m1 failed <<<"$out")" >&2
	((r == 0)) || echo "  anomaly: $r requests refused (limits should never be reached)" >&2
}

for keys in $KEYS; do
	for unit in $UNITS; do
		if ((keys == 1)); then key=hot_$unit; else key=per_$unit; fi
		servers="sluice envoy"
		[[ $impls == *sluice-lease* ]] && servers+=" sluice-lease"
		[[ $impls == *sluice-memory* ]] && servers+=" sluice-memory"
		[[ $impls == *floor* ]] && servers+=" floor"
		if ((WARMUP > 0)); then
			for impl in $servers; do bench "$impl" "$key" "$keys" 16 "$WARMUP" >/dev/null; done
		fi
		for c in $CLIENTS; do
			echo "== $keys keys, unit $unit, $c clients" >&2
			for round in $(seq 1 "$ROUNDS"); do
				order=$servers
				((round % 2 == 0)) && order=$(tr ' ' '\n' <<<"$servers" | tac | tr '\n' ' ')
				for impl in $order; do run "$round" "$impl" "$key" "$keys" "$c"; done
			done
		done
	done
done

# --- tables -------------------------------------------------------------------
table() {
	awk '
	function field(line, name,   i, n, kv) {
		n = split(line, kv, " ")
		for (i = 1; i <= n; i++) if (index(kv[i], name "=") == 1) return substr(kv[i], length(name) + 2)
		return ""
	}
	function median(list,   a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	function comma(x,   s) {
		s = sprintf("%d", x + 0.5)
		while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]([,]|$)/, ",&", s)
		return s
	}
	function ratio(a, b) { return b > 0 ? a / b : 0 }
	{
		impl = field($0, "impl"); k = field($0, "keys") SUBSEP field($0, "unit") SUBSEP field($0, "clients")
		round = field($0, "round")
		if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
		if (round > maxround[k]) maxround[k] = round
		dps[k, round, impl] = field($0, "decisions/s"); p99[k, round, impl] = field($0, "p99_us")
		srv[k, round, impl] = field($0, "server_cpu_us/dec"); rds[k, round, impl] = field($0, "redis_cpu_us/dec")
		have[k, impl] = 1
	}
	function row(label, set, k,   ks) {
		split(k, ks, SUBSEP)
		printf "| %s | %s | %s | %s | %s", set, (ks[1] == 1 ? "1 (hot)" : comma(ks[1])), ks[2], ks[3], label
	}
	END {
		hdr = "| set | keys | unit | clients | round | dec/s sluice | dec/s envoy | ratio | p99 ms sluice | envoy | ratio | server µs/dec sluice | envoy | ratio | Redis µs/dec sluice | envoy | ratio |"
		sep = "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for (pass = 1; pass <= 2; pass++) {
			print (pass == 1 ? "Per round (ratio: sluice / envoy; µs of CPU per decision):" : "Summary, medians over the rounds (ratio: median of the rounds'"'"' ratios):")
			print ""; print hdr; print sep
			for (variant = 1; variant <= 4; variant++) {
				s = variant == 1 ? "sluice" : variant == 2 ? "sluice-lease" : variant == 3 ? "sluice-memory" : "floor"
				set = variant == 1 ? "sluice" : variant == 2 ? "lease-tokens" : variant == 3 ? "in-memory" : "empty handler"
				for (i = 1; i <= nk; i++) {
					k = order[i]
					if (!have[k, s] || !have[k, "envoy"]) continue
					delete L
					for (round = 1; round <= maxround[k]; round++) {
						if (!((k, round, s) in dps) || !((k, round, "envoy") in dps)) continue
						v[1] = dps[k, round, s]; v[2] = dps[k, round, "envoy"]
						v[4] = p99[k, round, s]; v[5] = p99[k, round, "envoy"]
						v[7] = srv[k, round, s]; v[8] = srv[k, round, "envoy"]
						v[10] = rds[k, round, s]; v[11] = rds[k, round, "envoy"]
						for (j = 1; j <= 10; j += 3) { v[j + 2] = ratio(v[j], v[j + 1]) }
						for (j = 1; j <= 12; j++) L[j] = L[j] " " v[j]
						if (pass == 1) {
							row(round, set, k)
							printf " | %s | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", comma(v[1]), comma(v[2]), v[3], v[4] / 1000, v[5] / 1000, v[6], v[7], v[8], v[9], v[10], v[11], v[12]
						}
					}
					if (pass == 2) {
						for (j = 1; j <= 12; j++) m[j] = median(L[j])
						row("median", set, k)
						printf " | %s | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", comma(m[1]), comma(m[2]), m[3], m[4] / 1000, m[5] / 1000, m[6], m[7], m[8], m[9], m[10], m[11], m[12]
					}
				}
			}
			print ""
		}
	}' "$raw"
}
table | tee -a "$OUT"
for impl in $impls; do # what the servers logged (warn and above), for anomalies
	[[ -s $tmp/$impl.log ]] || continue
	{
		echo "# $impl logged $(wc -l <"$tmp/$impl.log") lines; the last:"
		tail -3 "$tmp/$impl.log" | cut -c1-300 | sed 's/^/#   /'
	} | tee -a "$OUT" >&2
done
echo "raw lines and tables: $OUT" >&2
