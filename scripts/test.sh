#!/usr/bin/env bash
# The test command: installs the real peers, then checks formatting, lints and runs the whole
# test suite against them.
#
#   bash scripts/test.sh
#
# Environment:
#   VOLLEY_SKIP_INSTALL=1        do not run scripts/install-deps.sh (peers already installed)
#   VOLLEY_TEST_RELEASE=1        run the tests with --release (optimised volley binary)
#   VOLLEY_TEST_ARGS="..."       extra arguments for `cargo test` (e.g. "--test accounting")
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=dev-null.sh
. scripts/dev-null.sh
ensure_dev_null

section() {
    printf '\n==== %s ====\n' "$*"
}

started=$(date +%s)
elapsed() { echo "$(( $(date +%s) - started ))s"; }

if [ -z "${VOLLEY_SKIP_INSTALL:-}" ] || [ "${VOLLEY_SKIP_INSTALL}" = "0" ]; then
    section "install peers and tools (scripts/install-deps.sh)"
    bash scripts/install-deps.sh
else
    section "install peers and tools: skipped (VOLLEY_SKIP_INSTALL=1)"
fi

# unbound and named live in /usr/sbin, which is not on every user's PATH.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
if [ -d "$HOME/.cargo/bin" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

section "versions"
rustc --version
cargo --version
for tool in unbound kresd dnsdist named kdig dnsperf dnsproxy; do
    if command -v "$tool" >/dev/null 2>&1; then
        printf '%-9s %s\n' "$tool" "$(command -v "$tool")"
    else
        printf '%-9s MISSING (run scripts/install-deps.sh)\n' "$tool"
    fi
done
echo "cores: $(nproc)"

# On CI the lock file must be committed and up to date.
locked=()
if [ "${CI:-}" = "true" ]; then
    locked=(--locked)
fi

section "cargo fmt --all -- --check"
cargo fmt --all -- --check

section "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets "${locked[@]}" -- -D warnings

profile_args=()
if [ "${VOLLEY_TEST_RELEASE:-0}" = "1" ]; then
    profile_args=(--release)
fi

section "cargo test --workspace ${profile_args[*]:-} (build)"
cargo test --workspace "${locked[@]}" "${profile_args[@]}" --no-run

# The install docs/install.md gives, from the same lock file, into a root of its own; then the
# installed binary names its build. --debug reuses the test build above (seconds: only the
# binary is linked again); a release install would compile the whole workspace again (on two
# cores, many minutes), which the release profile's own build and bench already cover.
section "cargo install --debug --locked --path crates/cli (temporary root)"
install_root=$(mktemp -d)
trap 'rm -rf "$install_root"' EXIT
cargo install --debug --locked --offline --path crates/cli --root "$install_root" 2>&1 | tail -n 3
version=$("$install_root/bin/volley" --version)
echo "$version"
want="${VOLLEY_BUILD_COMMIT:-$(git log -1 --format='%h %cs' --abbrev=12 2>/dev/null || echo 'unknown commit')}"
case "$version" in
    "volley "*" ($want)") ;;
    *) echo "installed volley --version '$version' does not name the build '$want'" >&2; exit 1 ;;
esac

section "cargo test --workspace ${profile_args[*]:-}"
# shellcheck disable=SC2086 # VOLLEY_TEST_ARGS is split on purpose.
cargo test --workspace "${locked[@]}" "${profile_args[@]}" ${VOLLEY_TEST_ARGS:-}

section "all checks passed in $(elapsed)"
