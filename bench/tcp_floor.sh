#!/usr/bin/env bash
# What one query per TCP connection costs at least on this machine, side by side with dnsperf
# and volley at the same rate against the same `volley serve`: bench/floor/tcp_floor.c, a C
# client that does nothing but the connection's system calls (blocking: its thread sleeps
# until each answer; lazy: answers read at the next tick, no wake-up for them), dnsperf
# (-O num-queries-per-conn=1) and volley run (--conn-queries 1). Issue 4 asks volley for 1.5x
# dnsperf's connections per CPU-second; this shows where the machine's own floor lies.
#
# Env: RATE (new connections per second, 1000), DURATION (10 s per side), ROUNDS (2),
# CONNECTIONS (dnsperf -c and volley --connections, 100), CC (cc), CLIENT_CORE (0),
# SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE="${RATE:-1000}"
DURATION="${DURATION:-10}"
ROUNDS="${ROUNDS:-2}"
CONNECTIONS="${CONNECTIONS:-100}"
CC="${CC:-cc}"

need dnsperf taskset jq /usr/bin/time ss "$CC"
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
QUERIES="$(write_queries)"
FLOOR="$WORK/tcp_floor"
"$CC" -O2 -o "$FLOOR" "$BENCH_DIR/floor/tcp_floor.c" || die "cannot build bench/floor/tcp_floor.c"

start_responder "$VOLLEY_BIN"
log "responder pid $SERVE_PID on core $SERVER_CORE (tcp $SERVE_TCP); clients on core $CLIENT_CORE"

# CPU µs per connection of a finished side, from its CPU time and its answered count.
per_conn() { div "$(calc 'c * 1e6' c="$(cat "$WORK/$1.cpu")")" "$2" %.1f; }

# CPU per connection, and the mean latency each generator reports (the C client measures none).
declare -A SUM LAT
for r in $(seq 1 "$ROUNDS"); do
    for mode in blocking lazy; do
        wait_time_wait
        measure "floor_${mode}_$r" "$FLOOR" "$mode" "$SERVE_TCP" "$RATE" "$DURATION"
        done_n="$(awk '{ print $2 }' "$WORK/floor_${mode}_$r.out")"
        SUM[$mode]+="$(per_conn "floor_${mode}_$r" "$done_n") "
    done
    wait_time_wait
    measure "dp_$r" dnsperf -m tcp -s 127.0.0.1 -p "$SERVE_TCP" -d "$QUERIES" -l "$DURATION" -Q "$RATE" \
        -c "$CONNECTIONS" -O num-queries-per-conn=1
    read -r done_n _ < <(dnsperf_stats "$WORK/dp_$r.out")
    SUM[dnsperf]+="$(per_conn "dp_$r" "$done_n") "
    LAT[dnsperf]+="$(awk '/Average Latency \(s\):/ && !seen { printf "%.0f", $4 * 1e6; seen = 1 }' "$WORK/dp_$r.out") "
    wait_time_wait
    measure "v_$r" "$VOLLEY_BIN" run "tcp://127.0.0.1:$SERVE_TCP" -d "$QUERIES" --rate "$RATE" -l "${DURATION}s" \
        -T 1 --connections "$CONNECTIONS" --conn-queries 1 --progress never -q -o "$WORK/v_$r.json"
    SUM[volley]+="$(per_conn "v_$r" "$(jq -r '.connections.opened' "$WORK/v_$r.json")") "
    LAT[volley]+="$(jq -r '.latency.mean_ns / 1000 | floor' "$WORK/v_$r.json") "
done
stop_pid "$SERVE_PID"

# The rounds' figures, "a / b", and their mean.
rounds() { echo "$1" | awk '{ s = 0; for (i = 1; i <= NF; i++) { s += $i; printf "%s%s", (i > 1 ? " / " : ""), $i } }'; }
mean() { echo "$1" | awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.1f", s / NF }'; }
DP="$(mean "${SUM[dnsperf]}")"
{
    echo "### One query per TCP connection: the machine's floor, dnsperf and volley"
    echo
    echo "$(machine_line). \`volley serve -T 1\` on core $SERVER_CORE; each client alone on core $CLIENT_CORE at $RATE new"
    echo "connections per second for $DURATION s, $ROUNDS rounds (figures per round, then their mean)."
    echo
    echo "| client | CPU µs per connection | mean | vs dnsperf (CPU per connection) | mean latency it reports, µs |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for k in blocking lazy dnsperf volley; do
        case "$k" in
            blocking) name="tcp_floor.c blocking (sleeps until each answer)" ;;
            lazy) name="tcp_floor.c lazy (answers read at the next tick)" ;;
            dnsperf) name="dnsperf -O num-queries-per-conn=1 -c $CONNECTIONS" ;;
            volley) name="volley run --conn-queries 1 --connections $CONNECTIONS" ;;
        esac
        echo "| $name | $(rounds "${SUM[$k]}") | $(mean "${SUM[$k]}") | $(div "$(mean "${SUM[$k]}")" "$DP") | $(rounds "${LAT[$k]:-n/a}") |"
    done
    echo
    echo "Issue 4's goal, 1.5x dnsperf's connections per CPU-second, is $(div "$DP" 1.5 %.1f) µs per connection here."
} | write_fragment tcp_floor
