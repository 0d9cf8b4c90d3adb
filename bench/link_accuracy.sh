#!/usr/bin/env bash
# The emulated link's accuracy through real TUN devices (crates/link/tests/accuracy.rs) with
# the issue's longer durations: the rate over 10 s at 1, 10 and 100 Mbit/s (the test suite
# uses 2 s), with every figure printed.
#
#   bash bench/link_accuracy.sh
#   VOLLEY_LINK_RATE_SECS=30 bash bench/link_accuracy.sh
#
# Needs root and /dev/net/tun. Quiet machines only: the tolerances are the issue's (delay p50
# within 50 us, p99 within 200 us; rate within 2 %).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export VOLLEY_LINK_RATE_SECS="${VOLLEY_LINK_RATE_SECS:-10}"
# The one-way delay's p99 held to the issue's 200 us (the test suite holds it to 2 ms).
export VOLLEY_LINK_STRICT=1
[ "$(id -u)" = 0 ] || die "needs root (network namespaces and TUN devices)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$REPO_DIR" && cargo test --release -p volley-link --test accuracy -- --nocapture --test-threads 1) \
    >"$WORK/accuracy.out" 2>&1 || { cat "$WORK/accuracy.out" >&2; die "an accuracy test failed"; }
{
    echo "### The emulated link's accuracy (crates/link/tests/accuracy.rs, rate over ${VOLLEY_LINK_RATE_SECS} s)"
    echo
    echo "Load average before: $load_before. $(machine_line)."
    echo
    echo '```'
    grep -E "one-way delay|issue's p99|lost |KS D|rate .* Mbit/s:|attempt" "$WORK/accuracy.out"
    echo '```'
} | write_fragment link_accuracy
