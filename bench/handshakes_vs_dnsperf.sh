#!/usr/bin/env bash
# A new connection for every query: handshakes completed per generator CPU-second, volley run
# (--conn-queries 1) against dnsperf (-O num-queries-per-conn=1), both against the same
# `volley serve`, over TCP and DoT with P-256 and Ed25519 certificates, plus volley alone over
# DoQ (dnsperf has no DoQ). Issue 4's goal: at least 1.5x dnsperf's handshakes per CPU-second.
#
# TCP also runs as fast as each generator can: dnsperf without -Q, volley in a closed loop from
# one source address and from 254 (--bind 127.0.1.0/24: on one address, ports in TIME_WAIT make
# connects costly).
#
# dnsperf neither verifies certificates nor resumes TLS sessions, so the compared volley run
# uses --insecure --tls-resume off (a full handshake each time, like dnsperf's); a second volley
# row shows its defaults (certificate verified, sessions resumed).
#
# Env: RATE (new connections per second, 1000), DURATION (10 s per side), CONNECTIONS
# (dnsperf -c and volley --connections, 100: dnsperf needs ~100 to reach 1000 new connections per second), KEYS ("p256 ed25519"), CLIENT_CORE (0),
# SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE="${RATE:-1000}"
DURATION="${DURATION:-10}"
CONNECTIONS="${CONNECTIONS:-100}"
KEYS="${KEYS:-p256 ed25519}"

need dnsperf taskset jq /usr/bin/time ss
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
QUERIES="$(write_queries)"
CA="$WORK/ca.pem"

# "handshakes_per_s handshakes_per_cpu_s server_cpu_pct" of a dnsperf side: one query per
# connection, so each completed query is one completed handshake.
dp_row() {
    local done secs
    read -r done secs < <(dnsperf_stats "$WORK/$1.out")
    echo "$(div "$done" "$secs" %.0f) $(div "$done" "$(cat "$WORK/$1.cpu")" %.0f)" \
        "$(div "$(calc 's * 100' s="$(cat "$WORK/$1.srv")")" "$secs" %.0f)"
}
# The same for volley: connections opened (handshakes completed) from its results.
v_row() {
    local opened secs
    opened="$(jq -r '.connections.opened' "$WORK/$1.json")"
    secs="$(jq -r '.elapsed_s' "$WORK/$1.json")"
    echo "$(div "$opened" "$secs" %.0f) $(div "$opened" "$(cat "$WORK/$1.cpu")" %.0f)" \
        "$(div "$(calc 's * 100' s="$(cat "$WORK/$1.srv")")" "$secs" %.0f)"
}

declare -A R
ROWS=()
run_pair() { # $1 = row key, $2 = url, $3 = dnsperf mode ("" for none), rest: extra volley args
    local key="$1" url="$2" mode="$3"
    shift 3
    if [ -n "$mode" ]; then
        wait_time_wait
        log "$key: dnsperf -m $mode -O num-queries-per-conn=1 -Q $RATE for ${DURATION}s"
        measure "dp_$key" dnsperf -m "$mode" -s 127.0.0.1 -p "${url##*:}" -O num-queries-per-conn=1 \
            -d "$QUERIES" -l "$DURATION" -Q "$RATE" -c "$CONNECTIONS" -q "$CONNECTIONS"
        R[dp_$key]="$(dp_row "dp_$key")"
        grep -q "Queries completed" "$WORK/dp_$key.out" || die "dnsperf reported nothing: $(tail -5 "$WORK/dp_$key.out")"
    fi
    local extra=(--insecure --tls-resume off)
    [ "${url%%://*}" = "tcp" ] && extra=()
    log "$key: volley run $url --conn-queries 1 --rate $RATE ${extra[*]} for ${DURATION}s"
    measure "v_$key" "$VOLLEY_BIN" run "$url" "$@" "${extra[@]}" --conn-queries 1 -d "$QUERIES" --rate "$RATE" \
        -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q -o "$WORK/v_$key.json"
    R[v_$key]="$(v_row "v_$key")"
    if [ "${url%%://*}" != "tcp" ]; then
        log "$key: volley run $url --conn-queries 1 --rate $RATE (verify, resume) for ${DURATION}s"
        measure "vd_$key" "$VOLLEY_BIN" run "$url" "$@" --ca "$CA" --conn-queries 1 -d "$QUERIES" --rate "$RATE" \
            -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q -o "$WORK/vd_$key.json"
        R[vd_$key]="$(v_row "vd_$key")"
    fi
    ROWS+=("$key")
}

# TCP as fast as each can: dnsperf with no rate limit, volley in a closed loop from one source
# address and from 254 (--bind: ports in TIME_WAIT are the limit on one address).
run_max() {
    wait_time_wait
    log "tcp max: dnsperf -m tcp -O num-queries-per-conn=1 (no -Q) for ${DURATION}s"
    measure dp_max dnsperf -m tcp -s 127.0.0.1 -p "${1##*:}" -O num-queries-per-conn=1 -d "$QUERIES" \
        -l "$DURATION" -c "$CONNECTIONS" -q "$CONNECTIONS"
    R[dp_max]="$(dp_row dp_max)"
    local b
    for b in one bind; do
        wait_time_wait
        local extra=()
        [ "$b" = bind ] && extra=(--bind 127.0.1.0/24)
        log "tcp max: volley run $1 --conn-queries 1 -c $CONNECTIONS ${extra[*]} for ${DURATION}s"
        measure "v_max_$b" "$VOLLEY_BIN" run "$1" "${extra[@]}" --conn-queries 1 -d "$QUERIES" -c "$CONNECTIONS" \
            -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q -o "$WORK/v_max_$b.json"
        R[v_max_$b]="$(v_row "v_max_$b")"
    done
}

first=1
for key in $KEYS; do
    start_responder "$VOLLEY_BIN" --dot-port 0 --doq-port 0 --key-type "$key" --ca-out "$CA"
    DOT_PORT="$(serve_port dot)"
    DOQ_PORT="$(serve_port doq)"
    wait_url_answers "$VOLLEY_BIN" "tls://127.0.0.1:$DOT_PORT" --ca "$CA"
    log "responder ($key) pid $SERVE_PID on core $SERVER_CORE; generators on core $CLIENT_CORE"
    if [ "$first" = 1 ]; then
        run_pair tcp "tcp://127.0.0.1:$SERVE_TCP" tcp
        run_max "tcp://127.0.0.1:$SERVE_TCP"
        first=0
    fi
    run_pair "dot_$key" "tls://127.0.0.1:$DOT_PORT" dot
    run_pair "doq_$key" "quic://127.0.0.1:$DOQ_PORT" ""
    stop_pid "$SERVE_PID"
done

field() { echo "${R[$1]:-n/a n/a n/a}" | awk -v i="$2" '{ print $i }'; }
label() {
    case "$1" in
        tcp) echo "TCP" ;;
        dot_*) echo "DoT (${1#dot_})" ;;
        doq_*) echo "DoQ (${1#doq_})" ;;
    esac
}

{
    echo "### New connection per query: handshakes per generator CPU-second"
    echo
    echo "Target: \`volley serve -T 1\` on core $SERVER_CORE with a generated certificate of each key" \
        "type; generator on core $CLIENT_CORE; $RATE new connections per second asked, $CONNECTIONS" \
        "connection slots, ${DURATION} s per side. dnsperf: \`-O num-queries-per-conn=1\` (TLS 1.3, no" \
        "verification, no resumption); volley: \`--conn-queries 1 --insecure --tls-resume off\`" \
        "(the same work), and a row with its defaults (verified, resumed). Handshakes = completed" \
        "connections (dnsperf: completed queries, one per connection). Client CPU is user + sys" \
        "from \`/usr/bin/time\`; server CPU from \`/proc\`. The TCP rows \"as fast as each can\" drop the rate:" \
        "dnsperf without \`-Q\`, volley in a closed loop of $CONNECTIONS. Goal (issue 4): volley/dnsperf ≥ 1.5." \
        "$(machine_line)."
    echo
    echo "| transport | generator | handshakes/s | handshakes per CPU-s | server CPU % | volley/dnsperf per CPU-s |"
    echo "| --- | --- | ---: | ---: | ---: | ---: |"
    for k in "${ROWS[@]}"; do
        if [ -n "${R[dp_$k]:-}" ]; then
            echo "| $(label "$k") | dnsperf | $(field "dp_$k" 1) | $(field "dp_$k" 2) | $(field "dp_$k" 3) | |"
        fi
        ratio=""
        [ -n "${R[dp_$k]:-}" ] && ratio="$(div "$(field "v_$k" 2)" "$(field "dp_$k" 2)")"
        name="volley"
        [ "$k" != tcp ] && name="volley (no verify, no resume)"
        echo "| $(label "$k") | $name | $(field "v_$k" 1) | $(field "v_$k" 2) | $(field "v_$k" 3) | $ratio |"
        if [ "$k" = tcp ] && [ -n "${R[dp_max]:-}" ]; then
            echo "| TCP, as fast as each can | dnsperf (no \`-Q\`) | $(field dp_max 1) | $(field dp_max 2) | $(field dp_max 3) | |"
            for b in one bind; do
                name="volley, closed loop, one source address"
                [ "$b" = bind ] && name="volley, closed loop, \`--bind 127.0.1.0/24\`"
                echo "| TCP, as fast as each can | $name | $(field "v_max_$b" 1) | $(field "v_max_$b" 2)" \
                    "| $(field "v_max_$b" 3) | $(div "$(field "v_max_$b" 2)" "$(field dp_max 2)") |"
            done
        fi
        if [ -n "${R[vd_$k]:-}" ]; then
            ratio=""
            [ -n "${R[dp_$k]:-}" ] && ratio="$(div "$(field "vd_$k" 2)" "$(field "dp_$k" 2)")"
            echo "| $(label "$k") | volley (verified, resumed) | $(field "vd_$k" 1) | $(field "vd_$k" 2) | $(field "vd_$k" 3) | $ratio |"
        fi
    done
    if [ -n "${R[v_max_one]:-}" ]; then
        lat() { jq -r '"p99 \(.latency.p99_ns / 1e6 * 100 | round / 100) ms, max \(.latency.max_ns / 1e6 * 100 | round / 100) ms"' "$WORK/$1.json"; }
        echo
        echo "volley's TCP closed loop, latency: one source address $(lat v_max_one); \`--bind 127.0.1.0/24\` $(lat v_max_bind)."
    fi
} | write_fragment handshakes_vs_dnsperf
