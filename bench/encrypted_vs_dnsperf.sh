#!/usr/bin/env bash
# volley run versus dnsperf over DoT and DoH/2 against the same `volley serve` (see
# bench/README.md). Issue 3's goal: at the same rate, volley uses at most half the CPU per
# answered query of `dnsperf -m dot` and `dnsperf -m doh`.
#
#  1. fixed rate: both at RATE qps for DURATION s; answered qps and client CPU µs per answer;
#  2. closed loop: both with INFLIGHT queries in flight; answered qps and client CPU µs per answer.
#
# Env: RATE (20000), DURATION (10 s per side), INFLIGHT (100: the responder's HTTP/2 stream limit
# per connection), CONNECTIONS (1), TRANSPORTS ("dot doh"), DOH_METHOD (post; or get, dnsperf's
# default), BATCH_WINDOW (250us), CLIENT_CORE (0), SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD,
# OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE="${RATE:-20000}"
DURATION="${DURATION:-10}"
INFLIGHT="${INFLIGHT:-100}"
CONNECTIONS="${CONNECTIONS:-1}"
TRANSPORTS="${TRANSPORTS:-dot doh}"
DOH_METHOD="${DOH_METHOD:-post}"
WINDOW="${BATCH_WINDOW:-250us}"

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
    local done secs cpu srv
    read -r done secs < <(dnsperf_stats "$WORK/$1.out")
    cpu="$(cat "$WORK/$1.cpu")"
    srv="$(cat "$WORK/$1.srv")"
    echo "$(div "$done" "$secs" %.0f) $(div "$(calc 'c * 1e6' c="$cpu")" "$done") $(div "$(calc 's * 100' s="$srv")" "$secs" %.0f)"
}
v_row() {
    local done secs cpu srv
    read -r done secs < <(volley_stats "$WORK/$1.json")
    cpu="$(cat "$WORK/$1.cpu")"
    srv="$(cat "$WORK/$1.srv")"
    echo "$(div "$done" "$secs" %.0f) $(div "$(calc 'c * 1e6' c="$cpu")" "$done") $(div "$(calc 's * 100' s="$srv")" "$secs" %.0f)"
}

declare -A R
for t in $TRANSPORTS; do
    target "$t"
    wait_url_answers "$VOLLEY_BIN" "$URL" --ca "$CA" "${V_ARGS[@]}"

    log "$t fixed rate: dnsperf ${DP_ARGS[1]} -Q $RATE for ${DURATION}s"
    measure "dp_rate_$t" dnsperf "${DP_ARGS[@]}" -d "$QUERIES" -l "$DURATION" -Q "$RATE" \
        -c "$CONNECTIONS" -q "$INFLIGHT"
    log "$t fixed rate: volley run $URL --rate $RATE for ${DURATION}s"
    measure "v_rate_$t" "$VOLLEY_BIN" run "$URL" --ca "$CA" "${V_ARGS[@]}" -d "$QUERIES" --rate "$RATE" \
        --batch-window "$WINDOW" -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q \
        -o "$WORK/v_rate_$t.json"

    log "$t closed loop: dnsperf -c $CONNECTIONS -q $INFLIGHT for ${DURATION}s"
    measure "dp_max_$t" dnsperf "${DP_ARGS[@]}" -d "$QUERIES" -l "$DURATION" -c "$CONNECTIONS" -q "$INFLIGHT"
    log "$t closed loop: volley run -c $INFLIGHT for ${DURATION}s"
    measure "v_max_$t" "$VOLLEY_BIN" run "$URL" --ca "$CA" "${V_ARGS[@]}" -d "$QUERIES" -c "$INFLIGHT" \
        -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q -o "$WORK/v_max_$t.json"

    R[dp_rate_$t]="$(dp_row "dp_rate_$t")"
    R[v_rate_$t]="$(v_row "v_rate_$t")"
    R[dp_max_$t]="$(dp_row "dp_max_$t")"
    R[v_max_$t]="$(v_row "v_max_$t")"
done
stop_pid "$SERVE_PID"

field() { echo "${R[$1]}" | awk -v i="$2" '{ print $i }'; }
label() { case "$1" in dot) echo "DoT" ;; doh) echo "DoH/2 (${DOH_METHOD^^})" ;; esac; }

{
    echo "### volley run vs dnsperf over DoT and DoH/2"
    echo
    echo "Target: \`volley serve -T 1\` on core $SERVER_CORE (its own CA); generator on core $CLIENT_CORE;" \
        "${DURATION} s per side; $CONNECTIONS connection(s); $INFLIGHT in flight at most" \
        "(dnsperf \`-q\`, volley \`-c\` in the closed loop). Client CPU is user + sys from" \
        "\`/usr/bin/time\`; server CPU from \`/proc\`. Goal (issue 3): volley/dnsperf CPU per answer ≤ 0.50" \
        "at the same rate. $(machine_line)."
    echo
    echo "| transport | measure | dnsperf | volley | volley/dnsperf |"
    echo "| --- | --- | ---: | ---: | ---: |"
    for t in $TRANSPORTS; do
        l="$(label "$t")"
        for m in rate max; do
            if [ "$m" = rate ]; then what="fixed rate $RATE qps"; else what="closed loop"; fi
            dq="$(field "dp_${m}_$t" 1)"; vq="$(field "v_${m}_$t" 1)"
            dc="$(field "dp_${m}_$t" 2)"; vc="$(field "v_${m}_$t" 2)"
            ds="$(field "dp_${m}_$t" 3)"; vs="$(field "v_${m}_$t" 3)"
            echo "| $l | $what: answered qps | $dq | $vq | $(div "$vq" "$dq") |"
            echo "| $l | $what: client CPU µs per answer | $dc | $vc | **$(div "$vc" "$dc")** |"
            echo "| $l | $what: server CPU % (of one core) | $ds | $vs | |"
        done
    done
} | write_fragment encrypted_vs_dnsperf
