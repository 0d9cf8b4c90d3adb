#!/usr/bin/env bash
# Coverage-guided fuzzing of every place where outside bytes come into volley (docs/reliability.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Runs each target (all of fuzz/fuzz_targets/ by default) one after the other for the given
# time (default 60 s) with libFuzzer, starting from its seed corpus (fuzz/corpus/TARGET, read
# only) and from what earlier runs found (fuzz/work/TARGET, not committed), with a memory limit
# (FUZZ_RSS_MB, default 2048) and a per-input time limit (FUZZ_TIMEOUT, default 10 s). Prints the
# executions and crashes of each target; exits 1 if any target crashed, timed out or ran out of
# memory (the input is in fuzz/artifacts/TARGET/; keep it in fuzz/regressions/TARGET/ once
# fixed, the test crates/cli/tests/fuzz_corpus.rs replays it).
#
# Needs the nightly toolchain; installs cargo-fuzz if it is missing. FUZZ_SANITIZER: none
# (default: safe Rust, faster) or address. FUZZ_JOBS: parallel fuzzing processes per target
# (default 1). FUZZ_NICE: the nice level (default 10). FUZZ_RUNS: stop a target once it has run
# this many inputs, before its time is up (the goal of docs/reliability.md: `FUZZ_RUNS=10000000
# scripts/fuzz.sh 3600`, ten million executions or an hour).
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
sanitizer=${FUZZ_SANITIZER:-none}
rss=${FUZZ_RSS_MB:-2048}
timeout=${FUZZ_TIMEOUT:-10}
jobs=${FUZZ_JOBS:-1}
nicelvl=${FUZZ_NICE:-10}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

dict_for() {
    case $1 in
        dns_message | responder_query | responder_stream | stream_frames) echo dict/dns.dict ;;
        http1_responses | doh_request) echo dict/http.dict ;;
        doh2_responses) echo dict/h2.dict ;;
        doh3_responses) echo dict/h3.dict ;;
        client_profile | link_profile | link_spec | experiment_spec) echo dict/toml.dict ;;
        target_url) echo dict/url.dict ;;
        zone_file) echo dict/zone.dict ;;
        *) echo "" ;;
    esac
}

nice -n "$nicelvl" cargo +nightly fuzz build -s "$sanitizer" >&2

failed=0
printf '%-18s %8s %14s %10s %8s  %s\n' target seconds executions exec/s crashes result
for t in "${targets[@]}"; do
    mkdir -p "work/$t" "artifacts/$t"
    log=$(mktemp)
    dict=$(dict_for "$t")
    args=(-max_total_time="$secs" -rss_limit_mb="$rss" -timeout="$timeout" -print_final_stats=1)
    [ "$jobs" -gt 1 ] && args+=(-jobs="$jobs" -workers="$jobs")
    [ -n "${FUZZ_RUNS:-}" ] && args+=(-runs="$FUZZ_RUNS")
    [ -n "$dict" ] && args+=(-dict="$dict")
    # Findings: crash-, timeout-, oom- and leak- files. A slow-unit- file is an input that took
    # over 10 s of wall time (libFuzzer's -report_slow_units), which a fuzzer paused with
    # SIGSTOP (or starved by the machine) also writes: counted apart, replayed to tell.
    findings() { find "artifacts/$t" -maxdepth 1 -type f ! -name 'slow-unit-*' | wc -l; }
    slow() { find "artifacts/$t" -maxdepth 1 -type f -name 'slow-unit-*' | wc -l; }
    before=$(findings)
    slow_before=$(slow)
    rc=0
    nice -n "$nicelvl" cargo +nightly fuzz run -s "$sanitizer" "$t" "work/$t" "corpus/$t" -- "${args[@]}" >"$log" 2>&1 || rc=$?
    execs=$(grep -h 'stat::number_of_executed_units' "$log" fuzz-*.log 2>/dev/null | awk '{s += $2} END {print s + 0}' || true)
    took=$(grep -h 'Done [0-9]* runs in' "$log" | tail -1 | sed 's/.*runs in \([0-9]*\) second.*/\1/' || true)
    after=$(findings)
    crashes=$((after - before))
    slow_units=$(($(slow) - slow_before))
    result=ok
    if [ $rc -ne 0 ] || [ $crashes -gt 0 ]; then
        result="FAILED (exit $rc; log $log; artifacts/$t)"
        failed=1
    else
        rm -f "$log"
    fi
    rm -f fuzz-*.log
    rate=$([ -n "${took:-}" ] && [ "${took:-0}" -gt 0 ] && echo $((execs / took)) || echo -)
    [ "$slow_units" -gt 0 ] && result="$result ($slow_units slow units in artifacts/$t: replay each with the target's binary)"
    printf '%-18s %8s %14s %10s %8s  %s\n' "$t" "${took:--}" "$execs" "$rate" "$crashes" "$result"
done
exit $failed
