#!/usr/bin/env bash
# Builds volley's container image with no registry (deploy/Containerfile, FROM scratch):
# the binary, the shared libraries ldd lists for it, and the CA bundle, under a root
# filesystem in a temporary build context.
#
#   deploy/build-image.sh [BINARY [TAG]]     default: target/release/volley volley:local
#
# Environment: DOCKER (default: docker), passed DOCKER_HOST and the like as usual.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-target/release/volley}"
tag="${2:-volley:local}"
docker="${DOCKER:-docker}"
[ -x "$bin" ] || { echo "build-image: no binary at $bin (cargo build --release first)" >&2; exit 2; }
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/bin" "$ctx/rootfs/tmp" "$ctx/rootfs/etc/ssl/certs"
cp "$bin" "$ctx/rootfs/usr/bin/volley"
# Every library the binary links, at the path the loader looks for it.
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
done
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
fi
cp "$here/Containerfile" "$ctx/Containerfile"
"$docker" build -q -f "$ctx/Containerfile" -t "$tag" "$ctx"
