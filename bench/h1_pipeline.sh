#!/usr/bin/env bash
# DoH over HTTP/1.1 with and without pipelining (`--h1-pipeline N`), the same closed loop of
# INFLIGHT queries against `volley serve`: answered qps, latency, the generator's and the
# responder's CPU per answer, and packets per answer. No peer beside it: dnsperf and dnspyre do
# not pipeline HTTP/1.1 (dnsperf speaks DoH over HTTP/2 only).
#
# Env: DEPTHS ("1 8 64"), INFLIGHT (64), DURATION (5 s per depth), DOH_METHOD (post),
# CLIENT_CORE (0), SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEPTHS="${DEPTHS:-1 8 64}"
INFLIGHT="${INFLIGHT:-64}"
DURATION="${DURATION:-5}"
DOH_METHOD="${DOH_METHOD:-post}"

need taskset jq
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
CA="$WORK/ca.pem"

start_responder "$VOLLEY_BIN" --doh-port 0 --ca-out "$CA"
DOH_PORT="$(serve_port doh)"
URL="https://127.0.0.1:$DOH_PORT/dns-query"
wait_url_answers "$VOLLEY_BIN" "$URL" --ca "$CA" --http 1.1
log "responder pid $SERVE_PID on core $SERVER_CORE (doh $DOH_PORT); generator on core $CLIENT_CORE"

ROWS=()
for depth in $DEPTHS; do
    log "--h1-pipeline $depth: $INFLIGHT in flight for ${DURATION}s"
    out="$WORK/h1_$depth.json"
    taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "$URL" --ca "$CA" --http 1.1 --doh-method "$DOH_METHOD" \
        --h1-pipeline "$depth" -c "$INFLIGHT" -l "${DURATION}s" -T 1 --target-pid "$SERVE_PID" \
        --progress never -q -o "$out" >"$WORK/h1_$depth.out" 2>&1 \
        || die "volley run --h1-pipeline $depth failed: $(tail -5 "$WORK/h1_$depth.out")"
    ROWS+=("$(jq -r --arg d "$depth" '[$d, .connections.opened, (.qps.answered | floor),
        ((.latency.p50_ns / 1000) | floor), .generator.cpu_us_per_answer, (.target_cpu.cpu_us_per_answer // 0),
        (if .totals.answered > 0 then (.totals.wire.packets_out + .totals.wire.packets_in) / .totals.answered else 0 end)]
        | @tsv' "$out")")
done
stop_pid "$SERVE_PID"

{
    echo "### DoH over HTTP/1.1: pipelining"
    echo
    echo "\`volley run https://… --http 1.1 --h1-pipeline N -c $INFLIGHT -T 1\` (${DOH_METHOD^^}) on core" \
        "$CLIENT_CORE against \`volley serve -T 1\` on core $SERVER_CORE, ${DURATION} s per depth; server CPU" \
        "from \`--target-pid\`. No peer: none pipelines HTTP/1.1. $(machine_line)."
    echo
    echo "| --h1-pipeline | connections | answered qps | p50 µs | generator CPU µs/answer | server CPU µs/answer | packets/answer |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for r in "${ROWS[@]}"; do
        IFS=$'\t' read -r d c q p g s k <<<"$r"
        printf '| %s | %s | %s | %s | %.2f | %.2f | %.2f |\n' "$d" "$c" "$q" "$p" "$g" "$s" "$k"
    done
} | write_fragment h1_pipeline
