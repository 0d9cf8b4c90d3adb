#!/usr/bin/env bash
# volley run versus dnsperf over DoT and DoH/2 against the same `volley serve` (see
# bench/README.md). Issue 3's goal: at the same rate, volley uses at most half the CPU per
# answered query of `dnsperf -m dot` and `dnsperf -m doh`.
#
#  1. fixed rates: dnsperf and volley at each of RATES qps for DURATION s, volley once per
#     batch window in WINDOWS (--batch-window: how early a query may leave with the ones due
#     before it; 250us is volley's default, 1ms is flamethrower's default batch interval);
#     answered qps and client CPU µs per answer;
#  2. closed loop: both with INFLIGHT queries in flight; answered qps and client CPU µs per answer.
#
# At a rate dnsperf cannot reach (its DoH client tops out near 14k qps on one connection
# here) the two do not run at the same rate: the table shows each one's answered qps.
#
# Env: RATES ("5000 10000 20000"), WINDOWS ("250us 1ms"), DURATION (10 s per side), INFLIGHT
# (100: the responder's HTTP/2 stream limit per connection), CONNECTIONS (1), TRANSPORTS
# ("dot doh"), DOH_METHOD (post; or get, dnsperf's default), CLIENT_CORE (0), SERVER_CORE (1),
# VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATES="${RATES:-${RATE:-5000 10000 20000}}"
WINDOWS="${WINDOWS:-${BATCH_WINDOW:-250us 1ms}}"
DURATION="${DURATION:-10}"
INFLIGHT="${INFLIGHT:-100}"
CONNECTIONS="${CONNECTIONS:-1}"
TRANSPORTS="${TRANSPORTS:-dot doh}"
DOH_METHOD="${DOH_METHOD:-post}"

need dnsperf taskset jq /usr/bin/time
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
QUERIES="$(write_queries)"
CA="$WORK/ca.pem"

start_responder "$VOLLEY_BIN" --dot-port 0 --doh-port 0 --ca-out "$CA"
DOT_PORT="$(serve_port dot)"
DOH_PORT="$(serve_port doh)"
log "responder pid $SERVE_PID on core $SERVER_CORE (dot $DOT_PORT, doh $DOH_PORT); generators on core $CLIENT_CORE"

# Sets URL (volley) and DP_ARGS (dnsperf) for transport $1.
target() {
    case "$1" in
        dot)
            URL="tls://127.0.0.1:$DOT_PORT"
            DP_ARGS=(-m dot -s 127.0.0.1 -p "$DOT_PORT")
            V_ARGS=()
            ;;
        doh)
            URL="https://127.0.0.1:$DOH_PORT/dns-query"
            DP_ARGS=(-m doh -s 127.0.0.1 -p "$DOH_PORT" -O "doh-uri=https://localhost:$DOH_PORT/dns-query"
                -O "doh-method=${DOH_METHOD^^}")
            V_ARGS=(--http 2 --doh-method "$DOH_METHOD")
            ;;
        *) die "unknown transport $1 (dot or doh)" ;;
    esac
}

# Prints "qps cpu_us_per_answer server_cpu_pct" for a finished side.
dp_row() {
    local done secs cpu srv lat
    read -r done secs < <(dnsperf_stats "$WORK/$1.out")
    cpu="$(cat "$WORK/$1.cpu")"
    srv="$(cat "$WORK/$1.srv")"
    lat="$(awk '/Average Latency \(s\):/ && !seen { printf "%.0f", $4 * 1e6; seen = 1 }' "$WORK/$1.out")"
    echo "$(div "$done" "$secs" %.0f) $(div "$(calc 'c * 1e6' c="$cpu")" "$done") $(div "$(calc 's * 100' s="$srv")" "$secs" %.0f) ${lat:-n/a}"
}
v_row() {
    local done secs cpu srv
    read -r done secs < <(volley_stats "$WORK/$1.json")
    cpu="$(cat "$WORK/$1.cpu")"
    srv="$(cat "$WORK/$1.srv")"
    echo "$(div "$done" "$secs" %.0f) $(div "$(calc 'c * 1e6' c="$cpu")" "$done") $(div "$(calc 's * 100' s="$srv")" "$secs" %.0f)" \
        "$(jq -r '.latency.mean_ns / 1000 | floor' "$WORK/$1.json")"
}

declare -A R
for t in $TRANSPORTS; do
    target "$t"
    wait_url_answers "$VOLLEY_BIN" "$URL" --ca "$CA" "${V_ARGS[@]}"

    for rate in $RATES; do
        log "$t fixed rate: dnsperf ${DP_ARGS[1]} -Q $rate for ${DURATION}s"
        measure "dp_${rate}_$t" dnsperf "${DP_ARGS[@]}" -d "$QUERIES" -l "$DURATION" -Q "$rate" \
            -c "$CONNECTIONS" -q "$INFLIGHT"
        R[dp_${rate}_$t]="$(dp_row "dp_${rate}_$t")"
        for w in $WINDOWS; do
            log "$t fixed rate: volley run $URL --rate $rate --batch-window $w for ${DURATION}s"
            measure "v_${rate}_${w}_$t" "$VOLLEY_BIN" run "$URL" --ca "$CA" "${V_ARGS[@]}" -d "$QUERIES" \
                --rate "$rate" --batch-window "$w" -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" \
                --progress never -q -o "$WORK/v_${rate}_${w}_$t.json"
            R[v_${rate}_${w}_$t]="$(v_row "v_${rate}_${w}_$t")"
        done
    done

    log "$t closed loop: dnsperf -c $CONNECTIONS -q $INFLIGHT for ${DURATION}s"
    measure "dp_max_$t" dnsperf "${DP_ARGS[@]}" -d "$QUERIES" -l "$DURATION" -c "$CONNECTIONS" -q "$INFLIGHT"
    log "$t closed loop: volley run -c $INFLIGHT for ${DURATION}s"
    measure "v_max_$t" "$VOLLEY_BIN" run "$URL" --ca "$CA" "${V_ARGS[@]}" -d "$QUERIES" -c "$INFLIGHT" \
        -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q -o "$WORK/v_max_$t.json"
    R[dp_max_$t]="$(dp_row "dp_max_$t")"
    R[v_max_$t]="$(v_row "v_max_$t")"
done
stop_pid "$SERVE_PID"

field() { echo "${R[$1]}" | awk -v i="$2" '{ print $i }'; }
label() { case "$1" in dot) echo "DoT" ;; doh) echo "DoH/2 (${DOH_METHOD^^})" ;; esac; }
# One table row: $1 transport label, $2 load, $3 generator, $4 result key, $5 dnsperf's key
# (empty on dnsperf's own row).
row() {
    local ratio=""
    [ -n "$5" ] && ratio="**$(div "$(field "$4" 2)" "$(field "$5" 2)")**"
    echo "| $1 | $2 | $3 | $(field "$4" 1) | $(field "$4" 4) | $(field "$4" 2) | $(field "$4" 3) | $ratio |"
}

{
    echo "### volley run vs dnsperf over DoT and DoH/2"
    echo
    echo "Target: \`volley serve -T 1\` on core $SERVER_CORE (its own CA); generator on core $CLIENT_CORE;" \
        "${DURATION} s per side; $CONNECTIONS connection(s); $INFLIGHT in flight at most" \
        "(dnsperf \`-q\`, volley \`-c\` in the closed loop). Client CPU is user + sys from" \
        "\`/usr/bin/time\`; server CPU from \`/proc\`. Goal (issue 3): volley/dnsperf CPU per answer ≤ 0.50" \
        "at the same rate. \`--batch-window\`: queries due within it leave together (250us is" \
        "volley's default): fewer wake-ups per query, and bursts that wait behind each other at" \
        "the server (the mean latency column). $(machine_line)."
    echo
    echo "| transport | load | generator | answered qps | mean latency µs | client CPU µs per answer | server CPU % (of one core) | volley/dnsperf CPU per answer |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
    for t in $TRANSPORTS; do
        l="$(label "$t")"
        for rate in $RATES; do
            row "$l" "fixed $rate qps" dnsperf "dp_${rate}_$t" ""
            for w in $WINDOWS; do
                row "$l" "fixed $rate qps" "volley --batch-window $w" "v_${rate}_${w}_$t" "dp_${rate}_$t"
            done
        done
        row "$l" "closed loop" dnsperf "dp_max_$t" ""
        row "$l" "closed loop" volley "v_max_$t" "dp_max_$t"
    done
} | write_fragment encrypted_vs_dnsperf
