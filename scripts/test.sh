#!/usr/bin/env bash
# The whole sluice test suite, the one command CI runs (.ci/run calls it).
# On a fresh machine it installs what it needs first (staticcheck from the Go
# module proxy; redis-server and redis-cli from Debian's packages: the Redis
# tests start their own servers and a 3-master cluster on free loopback
# ports, and stop them, never touching a Redis already running), then checks formatting, vets, lints, runs every test under
# the race detector, after a short fuzzing pass over every fuzz target and
# one iteration of every comparison benchmark in the bench/ module.
#
# Caddy and Traefik, for the forward-auth recipes of docs/proxies.md, Helm
# for the chart's test and an OpenTelemetry Collector for the trace tests
# are built from their Go modules (tools/caddy, tools/traefik, tools/helm,
# tools/otelcol) in the background from the start, at a lower priority, and
# cached per machine (~/.cache/sluice/): a later run reuses them. The
# container image (scripts/image.sh, podman) is built once and tested by
# cmd/sluice's TestImage and tools/charttest's podman kube play. Each step prints its elapsed
# seconds, and the run ends with a table of them.
#
# Environment: FUZZTIME (default 5s per target; 0 skips fuzzing),
# SLUICE_TOOLS_CACHE (where the Caddy and Traefik builds are cached;
# default ${XDG_CACHE_HOME:-~/.cache}/sluice).
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2
FUZZTIME=${FUZZTIME:-5s}

# step starts a step, closing the one before with its elapsed seconds; the
# EXIT trap prints every step's time.
run_start=$(date +%s)
step_name="" step_start=$run_start
step_times=()
# cpu_s prints the CPU seconds (user + system) of every child reaped so far;
# a step's share is the difference, and the background builds' CPU lands in
# the step that waits for them.
cpu_s() {
	times >"$workdir/times" # a builtin in this shell: a pipe would fork it
	sed -n 2p "$workdir/times" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%d", n }'
}
step_cpu=0
step_done() {
	if [ -n "$step_name" ]; then
		local now cpu; now=$(date +%s); cpu_s >"$workdir/cpu"; cpu=$(cat "$workdir/cpu")
		step_times+=("$(printf '%5ds %6ds  %s' $((now - step_start)) $((cpu - step_cpu)) "$step_name")")
		printf '   (%ds, %d CPU-s)\n' $((now - step_start)) $((cpu - step_cpu))
	fi
}
step() {
	step_done
	step_name=$*
	step_start=$(date +%s)
	cpu_s >"$workdir/cpu"; step_cpu=$(cat "$workdir/cpu")
	printf '\n== %s\n' "$*"
}
workdir=$(mktemp -d)
bgpids=()
image_built=""
# podman with scripts/image.sh's global flags (no systemd here).
podman_() { podman --cgroup-manager cgroupfs --events-backend file "$@"; }
on_exit() {
	local rc=$?
	for pid in "${bgpids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
	if [ -n "$image_built" ]; then podman_ rmi -f "$SLUICE_IMAGE" >/dev/null 2>&1 || true; fi
	step_done
	step_name=""
	printf '\n== step times (wall s, CPU s)\n'
	printf '%s\n' "${step_times[@]}"
	cpu_s >"$workdir/cpu"
	printf '%5ds %6ds  total (exit %d)\n' $(($(date +%s) - run_start)) "$(cat "$workdir/cpu")" "$rc"
	rm -rf "$workdir"
}
trap on_exit EXIT

command -v go >/dev/null || { echo "test.sh: Go 1.26 is required (https://go.dev/dl)" >&2; exit 1; }
# (/usr/sbin: nginx is found on PATH, and a user shell may lack it)
export PATH="$(go env GOPATH)/bin:$PATH:/usr/sbin"

# The one-time builds run at nice 10 while the steps below run (each in a
# process group of its own, stopped if the run stops first): on a warm
# machine they only check their cache.
build_bg() { # name script
	setsid nice -n 10 "$2" >"$workdir/$1.path" 2>"$workdir/$1.log" &
	bgpids+=($!)
	eval "${1}_pid=$!"
}
build_bg caddy tools/caddy/build.sh
build_bg traefik tools/traefik/build.sh
build_bg helm tools/helm/build.sh
build_bg otelcol tools/otelcol/build.sh

# Every plain build below (vet, the bench module, the sluice binary the
# clients' tests and the container image run) is static and path-trimmed,
# as scripts/image.sh builds the image's binary: one compilation of every
# dependency serves them all. The race detector needs cgo: its step sets
# CGO_ENABLED=1 (and no -trimpath) for itself.
# (GOFLAGS keeps what go env sets, e.g. a machine's -buildvcs=false.)
goflags=$(go env GOFLAGS)
export CGO_ENABLED=0 GOFLAGS="${goflags:+$goflags }-trimpath"

step "install tools"
# staticcheck (Go module proxy) in the background while Debian's packages
# install.
staticcheck_pid=""
if ! staticcheck -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" >"$workdir/staticcheck.log" 2>&1 &
	staticcheck_pid=$!
fi
# Debian packages, all missing ones in one apt-get install (one update),
# without their recommended packages: as root directly, else through sudo
# when there is one; otherwise it says what to install and stops.
#   redis-server, redis-cli: the Redis tests start their own servers.
#   python3 (>= 3.9, with venv) and Node (>= 18, with npm): the clients.
#   prometheus: promtool validates what /metrics serves.
#   chromium: headless, loads the live page in cmd/sluice's TestLivePage.
#   nginx: docs/proxies.md's forward-auth recipe (TestForwardAuthNginx).
#   podman, runc, catatonit: the container image (scripts/image.sh,
#   TestImage) and the chart's pod (tools/charttest, podman kube play).
missing=()
need() { # package command...
	local pkg=$1; shift
	for c in "$@"; do
		if ! command -v "$c" >/dev/null && [ ! -x "/usr/sbin/$c" ]; then missing+=("$pkg"); return; fi
	done
}
need redis-server redis-server
need redis-tools redis-cli
need python3 python3
need nodejs node
need npm npm
need prometheus promtool
need curl curl
need chromium chromium
need nginx nginx
need podman podman
need runc runc
need catatonit catatonit
if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then missing+=(python3-venv); fi
if [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then missing+=(ca-certificates); fi
# As root nothing asks for a password, so the packages install in the
# background while gofmt, go vet and staticcheck run (none of them needs a
# package); the first step that does (fuzzing: redisstore's target starts
# redis-server) waits for them (debs_ready).
# Through sudo they install here, in the foreground.
as_root=()
install_debs() {
	"${as_root[@]}" apt-get update -qq &&
		"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
apt_pid=""
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing Debian packages: ${missing[*]}"
	if [ "$(id -u)" = 0 ]; then
		install_debs >"$workdir/apt.log" 2>&1 &
		apt_pid=$!
	else
		command -v sudo >/dev/null || { echo "test.sh: install these Debian packages first (not root, and no sudo): ${missing[*]}" >&2; exit 1; }
		as_root=(sudo)
		install_debs
	fi
fi
debs_checked=""
debs_ready() {
	[ -z "$debs_checked" ] || return 0
	debs_checked=1
	if [ -n "$apt_pid" ]; then
		local t0; t0=$(date +%s)
		wait "$apt_pid" || { cat "$workdir/apt.log"; echo "test.sh: installing ${missing[*]} failed" >&2; exit 1; }
		apt_pid=""
		echo "Debian packages installed: ${missing[*]} (waited $(($(date +%s) - t0))s for them)"
	fi
	redis-server --version
	python3 --version
	echo "node $(node --version), npm $(npm --version)"
	promtool --version 2>&1 | head -1
}
if [ -n "$staticcheck_pid" ]; then
	wait "$staticcheck_pid" || { cat "$workdir/staticcheck.log"; exit 1; }
fi
staticcheck -version

# The workspace's modules (go.work; see "Modules" in the README) are
# tested together: patterns name every module's packages. bench/ is a
# module outside the workspace (GOWORK=off).
pkgs=()
for d in $(go list -m -f '{{.Dir}}'); do
	rel=${d#"$PWD"}
	pkgs+=(".${rel}/...")
done

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-ed:"; echo "$unformatted"; exit 1
fi

step "go vet + staticcheck (${#pkgs[@]} modules: ${pkgs[*]})"
go vet "${pkgs[@]}"
staticcheck "${pkgs[@]}"
step "lean library (scripts/lean-check.sh)"
./scripts/lean-check.sh
step "go vet + staticcheck (bench/)"
(cd bench && GOWORK=off go vet ./... && GOWORK=off staticcheck ./...)

# fuzz_one fuzzes one target for FUZZTIME with one worker; two targets
# fuzz at a time (one per core), each into a log of its own. A finding
# writes a failing input under testdata/fuzz/ and fails the run. Go 1.26's
# fuzz coordinator can also fail a run with a bare "context deadline
# exceeded" at the -fuzztime boundary when its workers are starved of CPU
# (go.dev/issue/75804, fixed in Go 1.27): with no input written, the target
# is run once more, and only a second such failure with no input written is
# reported as a flake (not a failure).
fuzz_one() {
	local pkg=$1 target=$2 dir=$3 corpus="$3/testdata/fuzz/$2" before after
	local log="$workdir/fuzz-${pkg//\//_}-$target.log"
	echo "-- $pkg $target"
	for attempt in 1 2; do
		before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
		if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -parallel 1 "$pkg" >"$log" 2>&1; then
			return 0
		fi
		after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
		if [ "$after" != "$before" ] || ! grep -q "context deadline exceeded" "$log"; then
			echo "== $pkg $target failed:"
			cat "$log"
			return 1
		fi
		echo "   ($target: Go's fuzz coordinator missed its deadline, no input written: go.dev/issue/75804; attempt $attempt)"
	done
	echo "   flake: $target hit go.dev/issue/75804 twice with no failing input; not counted as a failure"
}

if [ "$FUZZTIME" != "0" ]; then
	step "fuzz (${FUZZTIME} per target, two at a time)"
	debs_ready
	export -f fuzz_one
	export FUZZTIME workdir
	# (one go list for every package and its directory)
	while read -r pkg dir; do
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
			printf '%s\n%s\n%s\n' "$pkg" "$target" "$dir"
		done
	done < <(go list -f '{{.ImportPath}} {{.Dir}}' "${pkgs[@]}") |
		xargs -d '\n' -n 3 -P 2 bash -c 'fuzz_one "$@"' fuzz_one ||
		{ echo "test.sh: fuzzing found a failing input (above)" >&2; exit 1; }
fi

step "benchmarks compile and run once (bench/)"
debs_ready
(cd bench && GOWORK=off go test -count=1 -run '^$' -bench . -benchtime 1x ./... >/dev/null)

# The tests the race detector would falsify, run once without it: the
# allocation counts of a keyed check (CheckInto, 0) and of an Envoy call
# (at most 4), and the policy parser's linear time on a large file.
step "without -race: allocation counts and the parser's linear time"
go test -count=1 -run '^(TestCheckIntoReuses|TestOneDescriptorAllocs|TestManyFieldsLinear)$' ./limiter/ ./envoyrls/ ./policy/

# The clients, against a real sluice serve their tests start: the binary
# built once here, for them and for cmd/sluice's tests (SLUICE_BIN). The
# TypeScript build (npm ci: typescript, pinned in package-lock.json) also
# serves cmd/sluice's cross-language test below.
step "clients: build (sluice, @sluice/client) and install (sluice_client)"
clientdir=$workdir/clients
mkdir -p "$clientdir"
go build -o "$clientdir/sluice" ./cmd/sluice
# The container image, built once (its binary's packages are the ones just
# compiled): cmd/sluice's TestImage and tools/charttest run it.
export SLUICE_IMAGE=localhost/sluice:test-$$
scripts/image.sh "$SLUICE_IMAGE" >/dev/null 2>"$workdir/image.log" || { cat "$workdir/image.log"; exit 1; }
image_built=1
echo "image: $SLUICE_IMAGE ($(podman_ image inspect --format '{{.Size}}' "$SLUICE_IMAGE") bytes)"
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
python3 -m venv "$clientdir/venv"
"$clientdir/venv/bin/pip" install --quiet --disable-pip-version-check ./clients/python
"$clientdir/venv/bin/python" -c 'import sluice_client; print("pip install ./clients/python: sluice_client", sluice_client.__version__)'

# Issue 15's proof, short: worker processes sharing one provider budget
# through a real Redis (BENCHMARKS.md "One provider budget" has the 20 s
# run); issue 29's: workers converging on a provider's hidden capacity
# through an adaptive ceiling, as Go gates and through sluice serve
# (BENCHMARKS.md "Ceilings that learn" has the 60 s runs). After the
# clients step: they run its sluice binary.
step "shared provider budget and adaptive ceilings across worker processes (bench/llmproof, bench/adaptive)"
(cd bench && SLUICE_BIN="$clientdir/sluice" GOWORK=off go test -count=1 -run 'TestProof' ./llmproof/ ./adaptive/)

step "/metrics passes promtool check metrics"
cat > "$clientdir/policy.yaml" <<'EOF'
limits:
  - name: per_tenant
    key: "tenant:{tenant}"
    capacity: 2
    refill_per_second: 100
  - name: trial
    key: "tenant:{tenant}"
    capacity: 1
    refill_per_second: 1
    shadow: true
EOF
"$clientdir/sluice" serve --config "$clientdir/policy.yaml" --http 127.0.0.1:0 2> "$clientdir/serve.log" &
servepid=$!
for _ in $(seq 100); do grep -q '"msg":"sluice serving"' "$clientdir/serve.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*"msg":"sluice serving".*"http":"\([^"]*\)".*/\1/p' "$clientdir/serve.log" | head -1)
for _ in 1 2 3 4; do curl -s -o /dev/null "http://$addr/v1/check" -d '{"descriptors":{"tenant":"a"},"max_wait_ms":500}'; done
curl -s "http://$addr/metrics" > "$clientdir/metrics.txt"
kill "$servepid"
promtool check metrics < "$clientdir/metrics.txt"
echo "sluice series checked: $(grep -c '^sluice_' "$clientdir/metrics.txt")"

step "clients: Python tests (clients/python)"
(cd clients/python && SLUICE_BIN="$clientdir/sluice" python3 -m unittest discover -s tests -t .)

step "clients: TypeScript tests (clients/typescript)"
(cd clients/typescript && SLUICE_BIN="$clientdir/sluice" node --test test/)

# Caddy v2 (tools/caddy, a module outside the workspace) and Traefik v3
# (tools/traefik), built from their Go modules in the background since the
# start (cached per machine), for docs/proxies.md's recipes (cmd/sluice
# TestForwardAuthCaddy, TestForwardAuthTraefik, TestForwardAuthClientCert).
step "Caddy, Traefik, Helm and the Collector from their Go modules (tools/; cached)"
for tool in caddy traefik helm otelcol; do
	pid_var=${tool}_pid
	if ! wait "${!pid_var}"; then
		echo "building $tool failed:"; cat "$workdir/$tool.log"; exit 1
	fi
	grep -v '^go: downloading' "$workdir/$tool.log" || true
done
export SLUICE_CADDY SLUICE_TRAEFIK SLUICE_OTELCOL HELM
SLUICE_CADDY=$(cat "$workdir/caddy.path")
SLUICE_TRAEFIK=$(cat "$workdir/traefik.path")
HELM=$(cat "$workdir/helm.path")
SLUICE_OTELCOL=$(cat "$workdir/otelcol.path")
bgpids=()
echo "caddy: $SLUICE_CADDY ($("$SLUICE_CADDY" version | head -1))"
echo "traefik: $SLUICE_TRAEFIK ($("$SLUICE_TRAEFIK" version | sed -n 's/^Version: *//p'))"
echo "helm: $HELM ($("$HELM" version --short))"
echo "otelcol: $SLUICE_OTELCOL ($("$SLUICE_OTELCOL" --version))"

# The chart (deploy/helm/sluice): helm lint and template for each
# documented combination, decoded strictly into the Kubernetes API types,
# and the rendered Deployment and ConfigMap run with podman kube play on
# the image above. Compiled with tools/helm's flags, so that the k8s.io
# packages helm's build compiled are reused.
step "Helm chart (tools/charttest: lint, template, strict decode, podman kube play)"
(cd tools/charttest && GOWORK=off go test -count=1 -gcflags "all=-N -l -dwarf=false" ./...)

# Last, so that the run closes on go test's own summary lines (and the
# table of step times).
step "go test -race"
SLUICE_BIN="$clientdir/sluice" CGO_ENABLED=1 GOFLAGS="$goflags" go test -race -shuffle=on -count=1 "${pkgs[@]}"
