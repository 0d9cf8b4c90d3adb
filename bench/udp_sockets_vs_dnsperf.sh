#!/usr/bin/env bash
# Many UDP sockets at a low rate (issue 20, part 2): `volley run udp://... --connections N -Q RATE`
# beside `dnsperf -c N -Q RATE` against the same `volley serve`, and volley with one socket for
# the latency it should equal: client CPU per answered query (the whole process, user + sys,
# set-up included, from /usr/bin/time), its ratio to dnsperf's, and the mean latency each
# reports. Goal: volley's CPU per query no more than dnsperf's, its latency that of one socket.
# Env: SOCKETS (1000), RATE (100), DURATION (10 s per side), ROUNDS (2), CLIENT_CORE (0),
# SERVER_CORE (1), VOLLEY (a prebuilt binary), OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sockets="${SOCKETS:-1000}" rate="${RATE:-100}" duration="${DURATION:-10}" rounds="${ROUNDS:-2}"
need kdig dnsperf taskset jq /usr/bin/time
check_cores
volley="$(volley_bin)"
queries="$(write_queries)"
start_responder "$volley"
wait_answers "$SERVE_UDP" www.example.test udp
log "responder pid $SERVE_PID on core $SERVER_CORE, udp port $SERVE_UDP; generators on core $CLIENT_CORE"

# One row per run: side, answered, CPU s, mean latency ms, set-up s (volley).
rows=()
for round in $(seq 1 "$rounds"); do
    log "round $round: dnsperf -c $sockets -Q $rate for ${duration}s"
    measure "dp$round" dnsperf -s 127.0.0.1 -p "$SERVE_UDP" -d "$queries" -l "$duration" -Q "$rate" -c "$sockets"
    read -r n_done _ < <(dnsperf_stats "$WORK/dp$round.out")
    mean="$(awk '/Average Latency \(s\):/ { printf "%.3f", $4 * 1000 }' "$WORK/dp$round.out")"
    rows+=("dnsperf -c $sockets|$n_done|$(cat "$WORK/dp$round.cpu")|$mean|")
    for n in "$sockets" 1; do
        log "round $round: volley run --connections $n -Q $rate for ${duration}s"
        measure "v$n-$round" "$volley" run "udp://127.0.0.1:$SERVE_UDP" -d "$queries" -Q "$rate" -l "${duration}s" \
            -T 1 --connections "$n" --progress never -q -o "$WORK/v$n-$round.json"
        read -r n_done _ < <(volley_stats "$WORK/v$n-$round.json")
        mean="$(jq -r '.latency.mean_ns / 1e6 | . * 1000 | round / 1000' "$WORK/v$n-$round.json")"
        setup="$(jq -r '.setup_s // 0 | . * 1000 | round / 1000' "$WORK/v$n-$round.json")"
        rows+=("volley --connections $n|$n_done|$(cat "$WORK/v$n-$round.cpu")|$mean|$setup")
    done
done
stop_pid "$SERVE_PID"

# CPU µs per answer of dnsperf, all rounds together, for the ratio.
dp_us="$(printf '%s\n' "${rows[@]}" | awk -F'|' '$1 ~ /^dnsperf/ { a += $2; c += $3 } END { if (a) printf "%.1f", c * 1e6 / a }')"
{
    echo "### $sockets UDP sockets at $rate qps: volley run against dnsperf"
    echo
    echo "Target: \`volley serve -T 1\` on core $SERVER_CORE; generator on core $CLIENT_CORE; $rounds rounds of" \
        "${duration} s per side; CPU is the generator process's user + sys (set-up included). $(machine_line)."
    echo
    echo "| run | answered | client CPU µs per answer | / dnsperf | mean latency ms | set-up s |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: |"
    for r in "${rows[@]}"; do
        IFS="|" read -r side n_done cpu mean setup <<<"$r"
        us="$(div "$(calc 'c * 1e6' c="$cpu")" "$n_done" %.1f)"
        echo "| $side | $n_done | $us | $(div "$us" "$dp_us") | $mean | ${setup:-} |"
    done
} | write_fragment udp_sockets_vs_dnsperf
