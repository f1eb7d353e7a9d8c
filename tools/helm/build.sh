#!/usr/bin/env bash
# Builds Helm from its Go module (this directory: go.mod's `tool
# helm.sh/helm/v3/cmd/helm`, pinned by go.mod and go.sum), once per machine,
# for the chart deploy/helm/sluice (tools/charttest runs `helm lint` and
# `helm template` with it), and prints the binary's path.
#
# The binary is cached under ${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/sluice}/helm-<version>-<digest>/,
# the digest that of this directory's go.mod, go.sum and build.sh: a later
# run on the same machine reuses it, and any change to them builds anew.
# Delete that directory to rebuild.
set -euo pipefail
cd "$(dirname "$0")"

version=$(sed -n 's/^[[:space:]]*helm.sh\/helm\/v3 \(v[^ ]*\).*$/\1/p' go.mod)
[ -n "$version" ] || { echo "tools/helm: no helm.sh/helm/v3 requirement in go.mod" >&2; exit 1; }
digest=$(cat go.mod go.sum build.sh | sha256sum | cut -c1-12)
cache=${SLUICE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/helm-${version}-${digest}
bin=$cache/helm

if [ -x "$bin" ] && "$bin" version --short 2>/dev/null | grep -q "^${version}"; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The Kubernetes version helm assumes without a cluster (helm template's
# .Capabilities.KubeVersion, helm lint's deprecation checks), set the way
# helm's Makefile sets it: client-go v0.N is Kubernetes 1.N.
k8s=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*$/\1/p' go.mod)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${version}"
if [ -n "$k8s" ]; then
	for pkg in pkg/lint/rules pkg/chartutil; do
		ldflags+=" -X helm.sh/helm/v3/${pkg}.k8sVersionMajor=1 -X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${k8s}"
	done
fi
# Without optimisations, inlining or DWARF (-N -l -dwarf=false; -s -w drop
# it at link anyway): a test tool, and about 35 %
# less CPU to build. CGO off: a static binary, no C toolchain needed.
CGO_ENABLED=0 GOWORK=off go build -trimpath -gcflags "all=-N -l -dwarf=false" -ldflags "$ldflags" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm >&2
mv -f "$tmp/helm" "$bin"
echo "$bin"
