#!/usr/bin/env bash
# Many simulated clients from one process: resident memory per client and timing fidelity.
#
#   CLIENTS=1000000 TOTAL_QPS=50000 DURATION=8 bash bench/clients_scale.sh
#
# There is no peer to run beside it on this machine (DNS Shotgun is not packaged); the figures
# are volley's own: RSS (from /usr/bin/time), answered share, send lateness p50/p99.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CLIENTS="${CLIENTS:-1000000}"
TOTAL_QPS="${TOTAL_QPS:-50000}"
DURATION="${DURATION:-8}"
need /usr/bin/time jq taskset
check_cores
volley="$(volley_bin)"
start_responder "$volley"
rate=$(awk -v q="$TOTAL_QPS" -v c="$CLIENTS" 'BEGIN { printf "%.9f", q / c }')
log "volley run udp://127.0.0.1:$SERVE_UDP --clients $CLIENTS --client-rate $rate for ${DURATION}s"
/usr/bin/time -f "%M" -o "$WORK/rss" taskset -c "$CLIENT_CORE" "$volley" run "udp://127.0.0.1:$SERVE_UDP" \
    --clients "$CLIENTS" --client-rate "$rate" -l "${DURATION}s" -T 1 -q --progress never -o "$WORK/r.json" \
    || die "volley run failed"
stop_pid "$SERVE_PID"
rss=$(cat "$WORK/rss")
{
    echo "### $CLIENTS simulated UDP clients from one process"
    echo
    echo "$TOTAL_QPS qps in total, ${DURATION} s, one generator thread on core $CLIENT_CORE. $(machine_line)."
    echo
    echo "| clients | sent | answered | RSS | bytes per client | lateness p50 | lateness p99 |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    jq -r --arg rss "$rss" --arg n "$CLIENTS" '"| \($n) | \(.totals.sent) | \(.totals.answered) | \($rss) KiB | \(($rss|tonumber)*1024/($n|tonumber)|floor) | \(.send_lateness.p50_ns/1000|floor) µs | \(.send_lateness.p99_ns/1000|floor) µs |"' "$WORK/r.json"
} | write_fragment clients_scale
