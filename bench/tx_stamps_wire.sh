#!/usr/bin/env bash
# The encrypted transports' service time against the wire (issue 21): `volley calibrate` cannot
# match encrypted messages, but with one query in flight (`-c 1`) each exchange is the client's
# packet with data followed by the server's next packet with data. For DoQ, DoH/3, DoH/2 and
# DoH/1.1 (hyper), with `--tx-stamps on` and `off`: tcpdump on lo during `volley run URL -c 1`
# against `volley serve`, tshark's frame times of the packets with payload, each client packet
# paired with the server's next; the wire's p50, p90 and mean beside volley's service time of
# the same run. Needs root (or CAP_NET_RAW) for tcpdump.
#
# Env: QUERIES (3000 per run), CLIENT_CORE (0), SERVER_CORE (1), VOLLEY (a prebuilt binary),
# VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

QUERIES="${QUERIES:-3000}"

need taskset jq tcpdump tshark python3
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
start_responder "$VOLLEY_BIN" --doh-port 0 --doh3-port 0 --doq-port 0 --ca-out "$WORK/ca.pem"
DOH="$(serve_port doh)"
DOH3="$(serve_port doh3)"
DOQ="$(serve_port doq)"
wait_url_answers "$VOLLEY_BIN" "quic://127.0.0.1:$DOQ" --ca "$WORK/ca.pem"

# The wire's exchanges in capture $1 (server port $2, `tcp` or `udp`): "p50 p90 mean count", µs.
wire() {
    local filter=(-e udp.srcport)
    [ "$3" = tcp ] && filter=(-Y 'tcp.len>0' -e tcp.srcport)
    tshark -r "$1" "${filter[@]}" -T fields -e frame.time_epoch 2>/dev/null | python3 -c '
import sys, statistics
from decimal import Decimal
port = sys.argv[1]
d, last = [], None
for line in sys.stdin:
    src, t = line.split()
    t = Decimal(t)
    if src != port:
        last = t
    elif last is not None:
        d.append(float(t - last) * 1e6)
        last = None
d.sort()
n = len(d)
print("%.1f %.1f %.1f %d" % (d[n // 2], d[int(n * 0.9)], statistics.mean(d), n) if n else "0 0 0 0")
' "$2"
}

# One run: prints a table row.
one() {
    local name="$1" url="$2" port="$3" proto="$4" stamps="$5"
    shift 5
    local cap="$WORK/cap.pcap"
    tcpdump -i lo -w "$cap" --time-stamp-precision nano -U "$proto" port "$port" >"$WORK/tcpdump.log" 2>&1 &
    local td=$!
    PIDS+=("$td")
    sleep 1
    taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "$url" --ca "$WORK/ca.pem" "$@" -c 1 -n "$QUERIES" -T 1 \
        --tx-stamps "$stamps" --progress never -o "$WORK/run.json" >"$WORK/run.out" 2>&1 \
        || die "volley run ($name) failed: $(tail -5 "$WORK/run.out")"
    sleep 0.5
    stop_pid "$td"
    read -r wp50 wp90 wmean wn < <(wire "$cap" "$port" "$proto")
    jq -r --arg name "$name" --arg s "$stamps" --arg wp50 "$wp50" --arg wp90 "$wp90" --arg wmean "$wmean" --arg wn "$wn" \
        '"| \($name) | \($s) | \(.send_stamps.kernel) / \(.send_stamps.fallback) | \($wn) | \($wp50) | \(.service_time.p50_ns / 1000 * 10 | round / 10) | \($wp90) | \(.service_time.p90_ns / 1000 * 10 | round / 10) | \($wmean) | \(.service_time.mean_ns / 1000 * 10 | round / 10) |"' \
        "$WORK/run.json"
}

rows=""
for stamps in on off; do
    log "--tx-stamps $stamps"
    rows+="$(one DoQ "quic://127.0.0.1:$DOQ" "$DOQ" udp "$stamps")"$'\n'
    rows+="$(one DoH/3 "h3://127.0.0.1:$DOH3/dns-query" "$DOH3" udp "$stamps")"$'\n'
    rows+="$(one DoH/2 "https://127.0.0.1:$DOH/dns-query" "$DOH" tcp "$stamps" --http 2)"$'\n'
    rows+="$(one "DoH/1.1 (hyper)" "https://127.0.0.1:$DOH/dns-query" "$DOH" tcp "$stamps" --http 1.1)"$'\n'
done

{
    echo "### Encrypted transports: service time against the wire, one query in flight"
    echo
    echo "\`volley run URL -c 1 -n $QUERIES -T 1 --tx-stamps on|off\` pinned to core $CLIENT_CORE against" \
        "\`volley serve -T 1\` on core $SERVER_CORE; tcpdump on lo, each client packet with payload paired" \
        "with the server's next (µs). Stamps: departures timed by the kernel / by volley's clock." \
        "$(machine_line); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| run | stamps | kernel / volley | wire exchanges | wire p50 | volley p50 | wire p90 | volley p90 | wire mean | volley mean |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    printf '%s' "$rows"
} | write_fragment tx_stamps_wire
