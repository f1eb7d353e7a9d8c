#!/usr/bin/env bash
# scripts/image.sh: build the sluice container image (Containerfile) FROM
# scratch with podman, or docker when podman is absent, and print its tag.
#
#   scripts/image.sh [TAG]          default TAG: $SLUICE_IMAGE, else localhost/sluice:dev
#
# Nothing is pulled: the script prepares the image's whole root filesystem in
# a temporary build context (the static binary, built here; /bin/ratelimit, a
# symlink to it; /etc/passwd and /etc/group with nonroot, uid 65532; this
# host's CA bundle; the example policy) and builds the Containerfile on it.
#
# Environment:
#   SLUICE_IMAGE            the tag (when no TAG argument)
#   SLUICE_IMAGE_ENGINE     podman or docker (default: podman if on PATH, else docker)
#   SLUICE_IMAGE_ENGINE_FLAGS  extra global flags of the engine, e.g. "--storage-driver vfs"
#   SLUICE_VERSION          the version `sluice version` prints (-X main.version); default:
#                           the module version Go records from git
#   CA_BUNDLE               CA certificates to copy (default /etc/ssl/certs/ca-certificates.crt)
#   GOARCH                  the image's architecture (default: this machine's)
#
# Only the tag is written on stdout; the build's output goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-${SLUICE_IMAGE:-localhost/sluice:dev}}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

engine=${SLUICE_IMAGE_ENGINE:-}
if [[ -z $engine ]]; then
	if command -v podman >/dev/null; then
		engine=podman
	elif command -v docker >/dev/null; then
		engine=docker
	else
		echo "image.sh: neither podman nor docker on PATH (apt-get install podman runc)" >&2
		exit 1
	fi
fi
# shellcheck disable=SC2206 # word splitting of the extra flags is meant
engine_flags=(${SLUICE_IMAGE_ENGINE_FLAGS:-})
if [[ $engine == podman ]]; then
	# Explicit, not the host's containers.conf: no systemd here.
	engine_flags=(--cgroup-manager cgroupfs --events-backend file "${engine_flags[@]}")
fi

if [[ ! -s $ca ]]; then
	echo "image.sh: no CA bundle at $ca (apt-get install ca-certificates, or set CA_BUNDLE)" >&2
	exit 1
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/sluice-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
rootfs=$ctx/rootfs
mkdir -p "$rootfs/bin" "$rootfs/etc/ssl/certs" "$rootfs/etc/sluice" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"

# The binary. In a git checkout Go records the revision, its time and
# whether the tree was modified (-buildvcs=true beats a GOFLAGS
# -buildvcs=false). Go looks for a .git directory only: in a worktree or a
# submodule (.git a file) the revision and a pseudo-version are given by -X
# instead. Outside git only SLUICE_VERSION, if given, is recorded.
buildvcs=false
revision=unknown
ldflags="-s -w"
xversion=${SLUICE_VERSION:-}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if git -C "$root" rev-parse --verify -q HEAD >/dev/null 2>&1; then
	revision=$(git -C "$root" rev-parse HEAD)
	dirty=""
	if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
		dirty="+dirty"
	fi
	if [[ -d $(git -C "$root" rev-parse --show-toplevel)/.git ]]; then
		buildvcs=true
	else
		ldflags+=" -X main.revision=$revision"
		if [[ -z $xversion ]]; then
			xversion=v0.0.0-$(TZ=UTC git -C "$root" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)-${revision:0:12}$dirty
		fi
	fi
	[[ -z $dirty ]] || revision+="-modified"
fi
if [[ -n $xversion ]]; then
	ldflags+=" -X main.version=$xversion"
fi
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=$buildvcs -ldflags "$ldflags" \
	-o "$rootfs/sluice" ./cmd/sluice) >&2
version=$("$rootfs/sluice" version 2>/dev/null || true)
version=${version#sluice }
version=${version%% *}
[[ -n $version ]] || version=unknown

ln -s /sluice "$rootfs/bin/ratelimit"
cp "$root/deploy/image/passwd" "$rootfs/etc/passwd"
cp "$root/deploy/image/group" "$rootfs/etc/group"
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
cp -L "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
cp "$root/deploy/image/policy.yaml" "$rootfs/etc/sluice/policy.yaml"
chmod -R a+rX,go-w "$rootfs"
chmod 1777 "$rootfs/tmp"
cp "$root/Containerfile" "$ctx/Containerfile"

format=()
if [[ $engine == podman ]]; then
	# OCI images cannot carry HEALTHCHECK; no layer cache (its key would
	# ignore the build arguments of the labels) and no intermediate images.
	format=(--format docker --layers=false)
fi
"$engine" "${engine_flags[@]}" build "${format[@]}" -f "$ctx/Containerfile" -t "$tag" \
	--build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "CREATED=$created" \
	"$ctx" >&2
echo "$tag"
