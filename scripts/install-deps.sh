#!/usr/bin/env bash
# Installs the real peers the test suite and the benchmarks run against, and the Rust
# components the checks need. Idempotent: installs only what is missing, runs `apt-get update`
# at most once, needs no TTY. Run as root (or with sudo available) on Debian 12.
#
#   bash scripts/install-deps.sh
#
# Environment:
#   VOLLEY_SKIP_GO_TOOLS=1   do not build the Go tools (dnsproxy, q, dnspyre)
#   GO=/path/to/go           the go binary (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { printf 'install-deps: error: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    fi
fi

# Debian packages: package name -> a file it installs (how we tell it is present).
APT_PACKAGES=(
    "knot-resolver:/usr/sbin/kresd"
    "unbound:/usr/sbin/unbound"
    "dnsdist:/usr/bin/dnsdist"
    "bind9:/usr/sbin/named"
    "knot-dnsutils:/usr/bin/kdig"
    # `ip` (namespaces and veth pairs in the link and --xdp tests, the neighbour table for
    # --xdp); kxdpgun (bench/xdp.sh) comes with knot-dnsutils. --xdp needs no libbpf, libxdp
    # or clang: its XDP program is assembled by volley and loaded with bpf(2).
    "iproute2:/sbin/ip"
    "bind9-dnsutils:/usr/bin/dig"
    "dnsperf:/usr/bin/dnsperf"
    "tcpdump:/usr/bin/tcpdump"
    "tshark:/usr/bin/tshark"
    "time:/usr/bin/time"
    "jq:/usr/bin/jq"
    "util-linux:/usr/bin/taskset"
    "openssl:/usr/bin/openssl"
    "ca-certificates:/etc/ssl/certs"
    # The Debian package (scripts/deb.sh, crates/cli/tests/package.rs) and reading its pages.
    "dpkg-dev:/usr/bin/dpkg-shlibdeps"
    "man-db:/usr/bin/man"
    # Headless browser for the HTML report test (crates/report/tests/html_report.rs).
    "chromium:/usr/bin/chromium"
    # A real Docker Swarm for the split run's test (crates/cli/tests/deploy.rs starts a daemon
    # of its own: nothing else is set up here), and pip for kubernetes-validate.
    "docker.io:/usr/sbin/dockerd"
    "python3-pip:/usr/bin/pip3"
)

install_apt_packages() {
    local missing=() entry pkg file
    for entry in "${APT_PACKAGES[@]}"; do
        pkg="${entry%%:*}"
        file="${entry#*:}"
        if [ -e "$file" ] && dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            continue
        fi
        missing+=("$pkg")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "Debian packages: all present"
        return 0
    fi
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
        die "not root and no sudo; install by hand: ${missing[*]}"
    fi
    log "Debian packages missing: ${missing[*]}"
    # tshark asks whether non-root users may capture; answer without a TTY.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
    $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
    # The packages start services on some systems; the tests start their own instances.
    for svc in unbound kresd@1 dnsdist named bind9; do
        $SUDO systemctl stop "$svc" >/dev/null 2>&1 || true
    done
}

install_rust_components() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup (https://rustup.rs)"
    local want=()
    cargo fmt --version >/dev/null 2>&1 || want+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || want+=(clippy)
    if [ "${#want[@]}" -eq 0 ]; then
        log "Rust components: rustfmt and clippy present"
        return 0
    fi
    command -v rustup >/dev/null 2>&1 || die "rustup not found; cannot add ${want[*]}"
    log "adding Rust components: ${want[*]}"
    rustup component add "${want[@]}"
}

# Go tools that speak DoQ / DoH/3 (dnsproxy), a DoQ-capable query tool (q) and a load generator
# to compare with (dnspyre). The module proxy refuses @latest for these: fixed versions.
GO_TOOLS=(
    "dnsproxy|github.com/AdguardTeam/dnsproxy|v0.84.1|"
    "q|github.com/natesales/q|v0.19.2|github.com/natesales/q"
    "dnspyre|github.com/tantalor93/dnspyre/v3|v3.11.1|"
)

find_go() {
    if [ -n "${GO:-}" ]; then
        [ -x "$GO" ] || return 1
        echo "$GO"
    elif command -v go >/dev/null 2>&1; then
        command -v go
    elif [ -x /usr/local/go/bin/go ]; then
        echo /usr/local/go/bin/go
    else
        return 1
    fi
}

install_go_tools() {
    if [ "${VOLLEY_SKIP_GO_TOOLS:-0}" = "1" ]; then
        log "Go tools: skipped (VOLLEY_SKIP_GO_TOOLS=1)"
        return 0
    fi
    local missing=() entry bin
    for entry in "${GO_TOOLS[@]}"; do
        bin="${entry%%|*}"
        [ -x "/usr/local/bin/$bin" ] || missing+=("$entry")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        log "Go tools: dnsproxy, q, dnspyre present"
        return 0
    fi
    local go
    go="$(find_go)" || die "go not found (GO=${GO:-unset}; looked on PATH and at /usr/local/go/bin/go): install Go from https://go.dev/dl/ into /usr/local/go to build:$(printf ' %s' "${missing[@]%%|*}")"
    local modcache mod ver nosum dir escaped
    [ -w /usr/local/bin ] || die "cannot write /usr/local/bin (run as root) to install:$(printf ' %s' "${missing[@]%%|*}")"
    modcache="$("$go" env GOMODCACHE)"
    [ -n "$modcache" ] || die "$go env GOMODCACHE is empty (is HOME or GOPATH set?)"
    for entry in "${missing[@]}"; do
        IFS='|' read -r bin mod ver nosum <<<"$entry"
        log "building $bin from $mod@$ver"
        GONOSUMDB="${nosum:-${GONOSUMDB:-}}" "$go" mod download "$mod@$ver" >/dev/null
        # The module cache escapes upper-case letters as !lower.
        escaped="$(printf '%s' "$mod" | sed -E 's/([A-Z])/!\L\1/g')"
        dir="$modcache/$escaped@$ver"
        [ -d "$dir" ] || die "module $mod@$ver not found at $dir after download"
        (cd "$dir" && GONOSUMDB="${nosum:-${GONOSUMDB:-}}" "$go" build -o "/usr/local/bin/$bin.tmp" . ) \
            || die "building $bin failed"
        mv -f "/usr/local/bin/$bin.tmp" "/usr/local/bin/$bin"
    done
}

# kubernetes-validate (PyPI): the Kubernetes API's schemas, bundled, for checking deploy/'s
# manifests offline (crates/cli/tests/deploy.rs).
install_kubernetes_validate() {
    if command -v kubernetes-validate >/dev/null 2>&1; then
        log "kubernetes-validate present"
        return 0
    fi
    local pip
    pip="$(command -v pip3 || command -v pip || true)"
    [ -n "$pip" ] || die "pip not found: install python3-pip to get kubernetes-validate"
    log "installing kubernetes-validate with $pip"
    # Debian's Python is externally managed: the flag lets pip install beside it.
    $SUDO "$pip" install -q kubernetes-validate 2>/dev/null \
        || $SUDO "$pip" install -q --break-system-packages kubernetes-validate
    command -v kubernetes-validate >/dev/null 2>&1 || die "kubernetes-validate not on PATH after pip install"
}

install_apt_packages
install_rust_components
install_go_tools
install_kubernetes_validate
# docker.io's package may start a system daemon; the tests start their own.
$SUDO systemctl stop docker.service docker.socket >/dev/null 2>&1 || true
log "done"
