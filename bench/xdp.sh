#!/usr/bin/env bash
# UDP generators over a veth pair into a network namespace (needs root and `ip`): kxdpgun
# (AF_XDP), dnsperf (sockets), `volley run` (sockets) and `volley run --xdp` (AF_XDP), one after
# the other against the same `volley serve -T 1` in the namespace (pinned to $SERVER_CORE), each
# pinned to $CLIENT_CORE, at each rate of RATES: CPU per answer (the whole process, user + sys),
# answers and queries sent per core-second, RUNS runs each (mean, min-max). The last rate,
# MAX_RATE (1,000,000), is more than any of them sends from one core: its "sent per core-second"
# is the most each generator reaches on one core (the one-core responder answers what it can).
# Under the table, a note for each row whose server answered less than offered (under 98 %,
# mean of the runs) while using about a whole core (90 % or more): the responder's core was
# the limit there, not the generator.
# volley runs with CONNECTIONS (4) sockets (source ports) and a TIMEOUT (1s): a lane has 65,536
# DNS IDs, which a server answering less than the rate fills within a second at 200k qps.
# Env: RATES ("50000 100000 200000"), MAX_RATE (1000000; "" leaves it out), RUNS (3), DURATION (5 s), TOOLS ("kxdpgun dnsperf volley
# volley-xdp"), CLIENT_CORE (0), SERVER_CORE (1), VOLLEY (a prebuilt binary), OUT_DIR (bench/out),
# RT_PRIO (unset: none): runs the responder and every generator at this SCHED_FIFO priority, so
# that other work on a shared machine (builds) does not starve them; real-time tasks sleep
# without timer slack, which makes kxdpgun's usleep() exact and its wake-ups more frequent than
# under the default 50 µs slack (volley sets its own to 1 ns either way): say so with figures.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATES="${RATES:-50000 100000 200000}"
MAX_RATE="${MAX_RATE-1000000}"
RATES="$RATES${MAX_RATE:+ $MAX_RATE}"
RUNS="${RUNS:-3}"
DURATION="${DURATION:-5}"
CONNECTIONS="${CONNECTIONS:-4}"
TIMEOUT="${TIMEOUT:-1s}"
TOOLS="${TOOLS:-kxdpgun dnsperf volley volley-xdp}"
KXDPGUN="${KXDPGUN:-$(command -v kxdpgun || echo /usr/sbin/kxdpgun)}"
[ "$(id -u)" = 0 ] || die "needs root (a namespace, a veth pair, XDP)"
need ip jq taskset dnsperf
[ -x "$KXDPGUN" ] || die "kxdpgun not installed (knot-dnsutils): run scripts/install-deps.sh"
check_cores
VOLLEY_BIN="$(volley_bin)"
PRIO=()
if [ -n "${RT_PRIO:-}" ]; then
    need chrt
    PRIO=(chrt -f "$RT_PRIO")
fi

veth_namespace
SERVER_IP="$SERVE_IP"

PORT=5353
ip netns exec "$NS" "${PRIO[@]}" taskset -c "$SERVER_CORE" "$VOLLEY_BIN" serve -l "$SERVER_IP" -p "$PORT" -T 1 --no-tcp \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=("$!")
wait_listening udp
# The responder is `ip netns exec`'s child: its own PID for the CPU it spends.
SERVE_PID="$(pgrep -n -P "${PIDS[-1]}" || echo "${PIDS[-1]}")"
QUERIES="$WORK/queries.txt"
printf 'www.example.test A\n' >"$QUERIES"

# One run: prints "answered sent cpu_s server_cpu_s".
one() {
    local tool="$1" rate="$2" label="$WORK/$1-$2" answered sent
    case "$tool" in
        kxdpgun)
            measure "$tool-$rate" "${PRIO[@]}" "$KXDPGUN" -t "$DURATION" -Q "$rate" -F "$CLIENT_CORE" -i "$QUERIES" -I "$HOST" \
                -p "$PORT" "$SERVER_IP"
            answered="$(awk '/^total replies:/ { print $3 }' "$label.out")"
            sent="$(awk '/^total queries:/ { print $3 }' "$label.out")"
            # kxdpgun leaves its XDP program on the interface.
            ip link set dev "$HOST" xdp off 2>/dev/null || true
            ;;
        dnsperf)
            measure "$tool-$rate" "${PRIO[@]}" dnsperf -s "$SERVER_IP" -p "$PORT" -d "$QUERIES" -Q "$rate" -l "$DURATION" -c 1 -q 10000
            answered="$(dnsperf_stats "$label.out" | cut -f1 -d' ')"
            sent="$(awk '/Queries sent:/ { print $3 }' "$label.out")"
            ;;
        volley | volley-xdp)
            local xdp=()
            [ "$tool" = volley-xdp ] && xdp=(--xdp "$HOST")
            measure "$tool-$rate" "${PRIO[@]}" "$VOLLEY_BIN" run "udp://$SERVER_IP:$PORT" "${xdp[@]}" -T 1 -d "$QUERIES" -Q "$rate" \
                --connections "$CONNECTIONS" -l "${DURATION}s" -t "$TIMEOUT" --progress never -o "$label.json"
            answered="$(jq -r .totals.answered "$label.json")"
            sent="$(jq -r .totals.sent "$label.json")"
            ;;
    esac
    echo "${answered:-0} ${sent:-0} $(cat "$WORK/$tool-$rate.cpu") $(cat "$WORK/$tool-$rate.srv")"
}

# "mean (min-max)" of a column of numbers, with a printf format.
summary() {
    awk -v f="$1" '{ s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1 }
        END { printf f " (" f "-" f ")\n", s / NR, lo, hi }'
}

{
    echo "UDP generators over a veth pair into a namespace, \`volley serve -T 1\` on core $SERVER_CORE in the"
    echo "namespace, each generator on core $CLIENT_CORE; $DURATION s per run, $RUNS runs each: mean (min-max);"
    echo "volley with --connections $CONNECTIONS -t $TIMEOUT. Load average before: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "CPU: the generator process's user + sys time. $(machine_line).${RT_PRIO:+ Responder and generators at SCHED_FIFO priority $RT_PRIO (no timer slack).}"
    echo
    echo "| rate | generator | answered/s | CPU per answer (µs) | answers per core-second | sent per core-second | server CPU per answer (µs) |"
    echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
} >"$WORK/table.md"
for rate in $RATES; do
    for tool in $TOOLS; do
        : >"$WORK/rows"
        for run in $(seq 1 "$RUNS"); do
            read -r answered sent cpu srv < <(one "$tool" "$rate")
            log "$tool at $rate qps, run $run: $sent sent, $answered answered, CPU $cpu s, server $srv s"
            echo "$answered $cpu $srv $sent" >>"$WORK/rows"
        done
        qps="$(awk -v d="$DURATION" '{ print $1 / d }' "$WORK/rows" | summary '%.0f')"
        per="$(awk '{ print ($1 > 0 ? $2 * 1e6 / $1 : 0) }' "$WORK/rows" | summary '%.2f')"
        core="$(awk '{ print ($2 > 0 ? $1 / $2 : 0) }' "$WORK/rows" | summary '%.0f')"
        srv="$(awk '{ print ($1 > 0 ? $3 * 1e6 / $1 : 0) }' "$WORK/rows" | summary '%.2f')"
        sentcore="$(awk '{ print ($2 > 0 ? $4 / $2 : 0) }' "$WORK/rows" | summary '%.0f')"
        echo "| $rate | $tool | $qps | $per | $core | $sentcore | $srv |" >>"$WORK/table.md"
        # The server answered less than offered (mean of the runs, under 98 %) while it used
        # about a whole core (90 % or more of the run): its one core, not the generator, set
        # the figures of this row.
        limit="$(awk -v d="$DURATION" -v r="$rate" '{ a += $1 / d; c += $3 / d }
            END { a /= NR; c /= NR; if (a < 0.98 * r && c >= 0.9) printf "%.0f %.2f\n", a, c }' "$WORK/rows")"
        if [ -n "$limit" ]; then
            read -r ans srvcore <<<"$limit"
            note="$tool at $rate qps: the server answered $ans/s of $rate offered, using $srvcore of a core: the responder's core was the limit"
            log "note: $note"
            echo "- $note." >>"$WORK/notes.md"
        fi
    done
done
if [ -s "$WORK/notes.md" ]; then
    { echo; cat "$WORK/notes.md"; } >>"$WORK/table.md"
fi
if grep -q '"xdp_' "$WORK"/volley-xdp-*.json 2>/dev/null; then
    echo >>"$WORK/table.md"
    echo "volley --xdp path: $(jq -r '.events | keys[] | select(startswith("xdp_"))' "$(ls "$WORK"/volley-xdp-*.json | head -1)")." >>"$WORK/table.md"
fi
write_fragment xdp <"$WORK/table.md"
