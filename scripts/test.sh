#!/usr/bin/env bash
# The whole sluice test suite, the one command CI runs (.ci/run calls it).
# On a fresh machine it installs what it needs first (staticcheck from the Go
# module proxy; redis-server and redis-cli from Debian's packages: the Redis
# tests start their own servers and a 3-master cluster on free loopback
# ports, and stop them, never touching a Redis already running), then checks formatting, vets, lints, runs every test under
# the race detector, after a short fuzzing pass over every fuzz target and
# one iteration of every comparison benchmark in the bench/ module.
#
# Environment: FUZZTIME (default 5s per target; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2
FUZZTIME=${FUZZTIME:-5s}

step() { printf '\n== %s\n' "$*"; }

command -v go >/dev/null || { echo "test.sh: Go 1.26 is required (https://go.dev/dl)" >&2; exit 1; }
export PATH="$(go env GOPATH)/bin:$PATH"

step "install tools"
if ! staticcheck -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi
staticcheck -version
# apt installs Debian packages: as root directly, else through sudo when
# there is one; otherwise it says what to install and stops.
apt_install() {
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
	elif command -v sudo >/dev/null; then
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
	else
		echo "test.sh: install these Debian packages first (not root, and no sudo): $*" >&2
		exit 1
	fi
}
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	apt_install redis-server redis-tools
fi
redis-server --version
# The Python and TypeScript clients (clients/): python3 >= 3.9 and Node >= 18
# with npm, from Debian's packages when missing.
if ! command -v python3 >/dev/null; then apt_install python3 python3-venv; fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then apt_install nodejs npm; fi
python3 --version
echo "node $(node --version), npm $(npm --version)"
# promtool (Debian's prometheus package) validates what /metrics serves.
if ! command -v promtool >/dev/null; then apt_install prometheus; fi
if ! command -v curl >/dev/null; then apt_install curl; fi
# Headless Chromium (Debian's package) loads the live page in cmd/sluice's
# TestLivePage.
if ! command -v chromium >/dev/null; then apt_install chromium; fi
# nginx (Debian's package) for docs/proxies.md's forward-auth recipe
# (cmd/sluice TestForwardAuthNginx).
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then apt_install nginx; fi
promtool --version 2>&1 | head -1

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

# fuzz_one fuzzes one target for FUZZTIME. A finding writes a failing input
# under testdata/fuzz/ and fails the run. Go 1.26's fuzz coordinator can also
# fail a run with a bare "context deadline exceeded" at the -fuzztime
# boundary when its workers are starved of CPU (go.dev/issue/75804, fixed in
# Go 1.27): with no input written, the target is run once more, and only a
# second such failure with no input written is reported as a flake (not a
# failure).
fuzz_one() {
	local pkg=$1 target=$2 dir=$3 corpus="$3/testdata/fuzz/$2" before after
	for attempt in 1 2; do
		before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
		if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/sluice-fuzz.log 2>&1; then
			return 0
		fi
		after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
		if [ "$after" != "$before" ] || ! grep -q "context deadline exceeded" /tmp/sluice-fuzz.log; then
			cat /tmp/sluice-fuzz.log
			exit 1
		fi
		echo "   (Go's fuzz coordinator missed its deadline, no input written: go.dev/issue/75804; attempt $attempt)"
	done
	echo "   flake: $target hit go.dev/issue/75804 twice with no failing input; not counted as a failure"
}

if [ "$FUZZTIME" != "0" ]; then
	step "fuzz (${FUZZTIME} per target)"
	for pkg in $(go list "${pkgs[@]}"); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
			echo "-- $pkg $target"
			fuzz_one "$pkg" "$target" "$dir"
		done
	done
fi

step "benchmarks compile and run once (bench/)"
(cd bench && GOWORK=off go test -count=1 -run '^$' -bench . -benchtime 1x ./... >/dev/null)

# Issue 15's proof, short: worker processes sharing one provider budget
# through a real Redis (BENCHMARKS.md "One provider budget" has the 20 s run).
step "shared provider budget across worker processes (bench/llmproof)"
(cd bench && GOWORK=off go test -count=1 -run TestProof ./llmproof/)

# The clients, against a real sluice serve their tests start: the binary
# built once here. The TypeScript build (npm ci: typescript, pinned in
# package-lock.json) also serves cmd/sluice's cross-language test below.
step "clients: build (sluice, @sluice/client) and install (sluice_client)"
clientdir=$(mktemp -d)
trap 'rm -rf "$clientdir"' EXIT
go build -o "$clientdir/sluice" ./cmd/sluice
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
python3 -m venv "$clientdir/venv"
"$clientdir/venv/bin/pip" install --quiet --disable-pip-version-check ./clients/python
"$clientdir/venv/bin/python" -c 'import sluice_client; print("pip install ./clients/python: sluice_client", sluice_client.__version__)'

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

# Caddy v2 built from its Go module (tools/caddy, outside the workspace)
# for docs/proxies.md's forward_auth recipe (cmd/sluice TestForwardAuthCaddy).
step "build Caddy from its Go module (tools/caddy)"
(cd tools/caddy && GOWORK=off go build -o "$clientdir/caddy" .)
export SLUICE_CADDY="$clientdir/caddy"
"$SLUICE_CADDY" version

# Last, so that the run closes on go test's own summary lines.
step "go test -race"
go test -race -count=1 "${pkgs[@]}"
