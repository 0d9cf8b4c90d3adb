#!/usr/bin/env bash
# Builds a Debian package of volley: the binary, its man pages and its shell completions.
#
#   bash scripts/deb.sh                  # release build, package in target/debian/
#   bash scripts/deb.sh --binary PATH    # package an existing binary instead of building
#   bash scripts/deb.sh --out DIR        # write the .deb into DIR
#
# Then: sudo apt install ./target/debian/volley_*.deb   (or dpkg -i)
#
# Only Debian's own tools (dpkg-deb, dpkg-shlibdeps for the library dependencies), no extra
# cargo plugin. The version is the crate's with the commit it was built from
# (0.1.0+git1a2b3c4d5e6f), as `volley --version` names it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { printf 'deb.sh: error: %s\n' "$*" >&2; exit 2; }

binary=""
out="target/debian"
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary="$2"; shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (--binary PATH, --out DIR)" ;;
    esac
done
for tool in dpkg-deb dpkg-shlibdeps gzip; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install dpkg-dev)"
done

if [ -z "$binary" ]; then
    cargo build --release -p volley
    binary="${CARGO_TARGET_DIR:-target}/release/volley"
fi
[ -x "$binary" ] || die "$binary: not an executable"

# "volley 0.1.0 (1a2b3c4d5e6f 2026-11-25)" -> 0.1.0+git1a2b3c4d5e6f
read -r _ version commit _ < <("$binary" --version | tr -d '()')
[ -n "$version" ] || die "$binary --version printed nothing"
case "$commit" in
    unknown|"") debversion="$version" ;;
    *) debversion="$version+git$commit" ;;
esac
arch=$(dpkg --print-architecture)

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/volley_${debversion}_$arch"
install -D -m 0755 "$binary" "$root/usr/bin/volley"
strip --strip-unneeded "$root/usr/bin/volley" 2>/dev/null || true
"$binary" man --dir "$root/usr/share/man/man1" 2>/dev/null
gzip -9n "$root"/usr/share/man/man1/*.1
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
    "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/doc/volley"
"$binary" completions bash > "$root/usr/share/bash-completion/completions/volley"
"$binary" completions zsh > "$root/usr/share/zsh/vendor-completions/_volley"
"$binary" completions fish > "$root/usr/share/fish/vendor_completions.d/volley.fish"
install -m 0644 README.md "$root/usr/share/doc/volley/README.md"
cat > "$root/usr/share/doc/volley/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: volley
Files: *
License: MIT or Apache-2.0
COPY

# The shared libraries the binary links, as package dependencies (dpkg-shlibdeps wants a
# debian/control beside it).
mkdir -p "$stage/src/debian"
printf 'Source: volley\n\nPackage: volley\nArchitecture: any\n' > "$stage/src/debian/control"
depends=$(cd "$stage/src" && dpkg-shlibdeps -O -e "$root/usr/bin/volley" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies for $binary"
size=$(du -sk "$root" | cut -f1)

install -d "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<CONTROL
Package: volley
Version: $debversion
Architecture: $arch
Maintainer: volley developers <volley@localhost>
Installed-Size: $size
Depends: $depends
Recommends: bash-completion
Section: net
Priority: optional
Description: measurement instrument for DNS transports
 A load generator, a responder (a DNS server on every transport: UDP, TCP, DoT,
 DoH over HTTP/1.1, HTTP/2 and HTTP/3, DoQ) and the analysis around them:
 latency from the kernel's own timestamps, limit searches, replay of captures,
 an emulated network link, HTML reports and exact merges of parallel runs.
CONTROL

mkdir -p "$out"
deb="$out/volley_${debversion}_$arch.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "$deb"
