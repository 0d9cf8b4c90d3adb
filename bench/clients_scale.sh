#!/usr/bin/env bash
# Many simulated clients from one process: resident memory per client, generator CPU per query,
# timing fidelity, and (DoT) the connections the clients hold at once.
#
#   CLIENTS=1000000 TOTAL_QPS=50000 DURATION=8 bash bench/clients_scale.sh
#   TRANSPORT=dot CLIENTS=100000 TOTAL_QPS=2000 DURATION=30 bash bench/clients_scale.sh
#
# UDP clients are stubs; DoT clients are forwarders (one connection each, closed after 10 s
# idle, opened again at the next query), so at a low rate per client only a share of them hold
# a connection at any moment, as with real clients, and the open-files limit bounds that share
# rather than the number of clients. Arrivals are Poisson (ARRIVALS).
#
# There is no peer to run beside it on this machine (DNS Shotgun is not packaged); the figures
# are volley's own: RSS (from /usr/bin/time), CPU (user + sys), answered share, send lateness.
# CONNECTIONS=N: the UDP clients share N sockets (default: one socket per client, as many as the
# open-files limit allows).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRANSPORT="${TRANSPORT:-udp}"
CLIENTS="${CLIENTS:-1000000}"
TOTAL_QPS="${TOTAL_QPS:-50000}"
DURATION="${DURATION:-8}"
ARRIVALS="${ARRIVALS:-poisson}"
need /usr/bin/time jq taskset
check_cores
volley="$(volley_bin_copy)"
start_clients_target "$volley" "$TRANSPORT"
rate=$(awk -v q="$TOTAL_QPS" -v c="$CLIENTS" 'BEGIN { printf "%.9f", q / c }')
log "volley run $url --clients $CLIENTS --client-rate $rate --arrivals $ARRIVALS for ${DURATION}s"
/usr/bin/time -f "%M %U %S" -o "$WORK/usage" taskset -c "$CLIENT_CORE" "$volley" run "$url" "${extra[@]}" \
    --clients "$CLIENTS" --client-rate "$rate" --arrivals "$ARRIVALS" -l "${DURATION}s" -T 1 ${CONNECTIONS:+--connections "$CONNECTIONS"} -q --progress never \
    -o "$WORK/r.json" >"$WORK/run.out" 2>&1 || die "volley run failed: $(tail -5 "$WORK/run.out")"
stop_pid "$SERVE_PID"
read -r rss user sys <"$WORK/usage"
cpu="$(calc 'u + s' u="$user" s="$sys")"
{
    echo "### $CLIENTS simulated ${TRANSPORT^^} clients from one process"
    echo
    echo "$TOTAL_QPS qps in total ($rate per client, $ARRIVALS arrivals), ${DURATION} s, one generator" \
        "thread on core $CLIENT_CORE, profile ${extra[1]}; \`volley serve -T 1\` on core $SERVER_CORE." \
        "Connections: the most open at once in a second, and opened in all. $(machine_line)."
    echo
    echo "| clients | sent | answered | RSS | bytes per client | CPU µs per query | lateness p50 | lateness p99 | connections open at once | opened |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    jq -r --arg rss "$rss" --arg n "$CLIENTS" --arg cpu "$cpu" '
        "| \($n) | \(.totals.sent) | \(.totals.answered) | \($rss) KiB | \(($rss|tonumber)*1024/($n|tonumber)|floor)" +
        " | \((($cpu|tonumber)*1e6/(.totals.sent|if . == 0 then 1 else . end))*10|floor/10)" +
        " | \(.send_lateness.p50_ns/1000|floor) µs | \(.send_lateness.p99_ns/1000|floor) µs" +
        " | \([.series[].connections.active] | max // 0) | \(.connections.opened // 0) |"' "$WORK/r.json"
} | write_fragment "clients_scale_$TRANSPORT"
