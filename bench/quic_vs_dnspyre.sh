#!/usr/bin/env bash
# volley run versus dnspyre over DoQ and DoH/3 against the same `volley serve` (see
# bench/README.md). Issue 3's goal: at least 3x the answered QPS of dnspyre at equal generator
# CPU, i.e. volley/dnspyre >= 3 in answered queries per generator CPU-second.
#
# Both generators run closed loop, pinned to the same core ($CLIENT_CORE) for DURATION s with
# INFLIGHT queries in flight (dnspyre -c: that many workers; volley -c), asking for
# www.example.test A. Reported: answered qps, generator CPU seconds (user + sys from
# /usr/bin/time), answered queries per CPU-second, and the server's CPU share (if it is near
# 100 %, the server and not the generator set the pace).
#
# Env: DURATION (10 s per side), INFLIGHT (100), TRANSPORTS ("doq doh3"), DNSPYRE (dnspyre),
# CLIENT_CORE (0), SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
INFLIGHT="${INFLIGHT:-100}"
TRANSPORTS="${TRANSPORTS:-doq doh3}"
DNSPYRE="${DNSPYRE:-dnspyre}"

need "$DNSPYRE" taskset jq /usr/bin/time
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
CA="$WORK/ca.pem"
NAME=www.example.test

# --max-streams: neither generator should wait on the server's per-connection stream limit.
streams=$((INFLIGHT > 100 ? INFLIGHT : 100))
start_responder "$VOLLEY_BIN" --doq-port 0 --doh3-port 0 --ca-out "$CA" --max-streams "$streams"
DOQ_PORT="$(serve_port doq)"
DOH3_PORT="$(serve_port doh3)"
log "responder pid $SERVE_PID on core $SERVER_CORE (doq $DOQ_PORT, doh3 $DOH3_PORT); generators on core $CLIENT_CORE"

# "qps cpu_s answers_per_cpu_s server_pct" from answered, seconds, label.
row() {
    local done="$1" secs="$2" cpu srv
    cpu="$(cat "$WORK/$3.cpu")"
    srv="$(cat "$WORK/$3.srv")"
    echo "$(div "$done" "$secs" %.0f) $(printf %.2f "$cpu") $(div "$done" "$cpu" %.0f) $(div "$(calc 's * 100' s="$srv")" "$secs" %.0f)"
}

declare -A R
for t in $TRANSPORTS; do
    case "$t" in
        doq)
            URL="quic://127.0.0.1:$DOQ_PORT"
            DP_ARGS=(--server "quic://127.0.0.1:$DOQ_PORT")
            ;;
        doh3)
            URL="h3://127.0.0.1:$DOH3_PORT/dns-query"
            DP_ARGS=(--server "https://127.0.0.1:$DOH3_PORT/dns-query" --doh-protocol 3 --doh-method post)
            ;;
        *) die "unknown transport $t (doq or doh3)" ;;
    esac
    wait_url_answers "$VOLLEY_BIN" "$URL" --ca "$CA"

    # Go reads the trust roots from SSL_CERT_FILE; dnspyre verifies the certificate like volley.
    log "$t: dnspyre -c $INFLIGHT for ${DURATION}s"
    measure "dp_$t" env SSL_CERT_FILE="$CA" "$DNSPYRE" "${DP_ARGS[@]}" -c "$INFLIGHT" -d "${DURATION}s" \
        -t A --no-progress --no-distribution --json "$NAME"
    jq -e . "$WORK/dp_$t.out" >/dev/null 2>&1 || die "dnspyre printed no JSON: $(tail -5 "$WORK/dp_$t.out")"
    log "$t: volley run $URL -c $INFLIGHT for ${DURATION}s"
    measure "v_$t" "$VOLLEY_BIN" run "$URL" --ca "$CA" --name "$NAME" --qtype A -c "$INFLIGHT" \
        -l "${DURATION}s" -T 1 --progress never -q -o "$WORK/v_$t.json"

    read -r dpd dps < <(dnspyre_stats "$WORK/dp_$t.out")
    read -r vd vs < <(volley_stats "$WORK/v_$t.json")
    R[dp_$t]="$(row "$dpd" "$dps" "dp_$t")"
    R[v_$t]="$(row "$vd" "$vs" "v_$t")"
    R[dp_io_$t]="$(jq -r '.totalIOErrors' "$WORK/dp_$t.out")"
done
stop_pid "$SERVE_PID"

field() { echo "${R[$1]}" | awk -v i="$2" '{ print $i }'; }
label() { case "$1" in doq) echo "DoQ" ;; doh3) echo "DoH/3" ;; esac; }

{
    echo "### volley run vs dnspyre over DoQ and DoH/3"
    echo
    echo "Target: \`volley serve -T 1\` on core $SERVER_CORE (its own CA, \`--max-streams $streams\`);" \
        "both generators closed loop with $INFLIGHT in flight, pinned to core $CLIENT_CORE, ${DURATION} s" \
        "each. Generator CPU is user + sys from" \
        "\`/usr/bin/time\`; server CPU from \`/proc\`. Goal (issue 3): volley/dnspyre ≥ 3.00 in answers per" \
        "generator CPU-second. $(machine_line)."
    echo
    echo "| transport | measure | dnspyre | volley | volley/dnspyre |"
    echo "| --- | --- | ---: | ---: | ---: |"
    for t in $TRANSPORTS; do
        l="$(label "$t")"
        echo "| $l | answered qps | $(field "dp_$t" 1) | $(field "v_$t" 1) | $(div "$(field "v_$t" 1)" "$(field "dp_$t" 1)") |"
        echo "| $l | generator CPU s | $(field "dp_$t" 2) | $(field "v_$t" 2) | $(div "$(field "v_$t" 2)" "$(field "dp_$t" 2)") |"
        echo "| $l | answers per generator CPU-second | $(field "dp_$t" 3) | $(field "v_$t" 3) | **$(div "$(field "v_$t" 3)" "$(field "dp_$t" 3)")** |"
        echo "| $l | server CPU % (of one core) | $(field "dp_$t" 4) | $(field "v_$t" 4) | |"
    done
    echo
    echo "dnspyre I/O errors (queries cut off at the end of the run):" \
        "$(for t in $TRANSPORTS; do printf '%s %s; ' "$(label "$t")" "${R[dp_io_$t]}"; done)"
} | write_fragment quic_vs_dnspyre
