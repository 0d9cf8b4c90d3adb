#!/usr/bin/env bash
# The emulated link's capacity (docs/link.md, issue 13): the packets per second its forwarder
# thread passes with a p99 lateness under 100 us, and its CPU per packet, at zero impairment
# and with the 4g profile; the same traffic over a plain veth pair (no emulator) beside it, so
# that the emulator's own cost is a ratio; and the generator's CPU per query with and without
# --link.
#
#   bash bench/link_capacity.sh
#   RATES="20000 50000 100000" DURATION=5 bash bench/link_capacity.sh
#   DEVICE=xdp bash bench/link_capacity.sh          # the link's XDP device (docs/link.md)
#   DEVICES="tun xdp" REPEAT=3 bash bench/link_capacity.sh   # both, alternately, 3 runs each
#
# DEVICE (or DEVICES, a list) picks the link's device (VOLLEY_LINK_DEVICE: tun, xdp); with
# REPEAT=N each device's link rows run N times, the devices taking turns within each round
# (so that a change in the machine's load falls on both), and a summary gives each device's
# figures per round, min to max, with the load average of the round.
#
# Needs root (namespaces, TUN, veth) and `ip`. The generator is `volley run` over UDP with
# the link's forwarder in the same process (pinned to $CLIENT_CORE with it: "one core"),
# `volley serve -T 1` the target on $SERVER_CORE. Each rate of RATES is an open-loop run of
# DURATION seconds; a closed loop of 200 queries in flight then saturates each path. A packet
# is one crossing of the link (a query up, an answer down: 2 per query).
#
# "alone" rows: the forwarder on $SERVER_CORE by itself (VOLLEY_LINK_CPU), the generator and
# the server both on $CLIENT_CORE, so that the forwarder's CPU per packet is its own core's
# (on a machine of two cores nothing else gives the forwarder a core of its own); without
# impairment and with 4g.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RATES="${RATES:-10000 25000 50000 75000 100000 150000}"
DURATION="${DURATION:-5}"
DEVICES="${DEVICES:-${DEVICE:-tun}}"
REPEAT="${REPEAT:-1}"
for dev in $DEVICES; do
    case "$dev" in tun | xdp) ;; *) die "DEVICE: tun or xdp, not '$dev'" ;; esac
done
need ip jq taskset
check_cores
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, TUN and veth devices)"
volley="$(volley_bin_copy)"

# The target on every address (the link's and the veth pair's host ends).
taskset -c "$SERVER_CORE" "$volley" serve --listen 0.0.0.0 -p 0 -T 1 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
port="$(serve_port udp)"

# A plain veth pair: namespace vlbench$$ at 10.214.77.2, the host at 10.214.77.1.
NS="vlbench$$"
ip netns add "$NS"
ip link add "vb$$h" type veth peer name "vb$$n"
ip link set "vb$$n" netns "$NS"
ip addr add 10.214.77.1/30 dev "vb$$h"
ip link set "vb$$h" up
ip -n "$NS" addr add 10.214.77.2/30 dev "vb$$n"
ip -n "$NS" link set "vb$$n" up
ip -n "$NS" link set lo up
veth_cleanup() { ip link del "vb$$h" 2>/dev/null || true; ip netns del "$NS" 2>/dev/null || true; cleanup; }
trap veth_cleanup EXIT

# One run: LABEL, then the load (-Q N or -c N); writes $WORK/LABEL.json. PATHKIND: link
# SPEC, veth, or direct (loopback).
one() {
    local label="$1" kind="$2" spec="$3"
    shift 3
    local common=(-l "${DURATION}s" -T 1 -q --progress never -o "$WORK/$label.json")
    case "$kind" in
    alone) taskset -a -cp "$CLIENT_CORE" "$SERVE_PID" >/dev/null
        VOLLEY_LINK_DEVICE="$DEV" VOLLEY_LINK_CPU="$SERVER_CORE" taskset -c "$CLIENT_CORE" "$volley" run "udp://127.0.0.1:$port" --link "$spec" \
            --link-seed 1 "$@" "${common[@]}" 2>"$WORK/$label.err"
        local rc=$?
        taskset -a -cp "$SERVER_CORE" "$SERVE_PID" >/dev/null
        return $rc ;;
    link) VOLLEY_LINK_DEVICE="$DEV" taskset -c "$CLIENT_CORE" "$volley" run "udp://127.0.0.1:$port" --link "$spec" --link-seed 1 \
        "$@" "${common[@]}" 2>"$WORK/$label.err" ;;
    veth) taskset -c "$CLIENT_CORE" ip netns exec "$NS" "$volley" run "udp://10.214.77.1:$port" \
        "$@" "${common[@]}" 2>"$WORK/$label.err" ;;
    direct) taskset -c "$CLIENT_CORE" "$volley" run "udp://127.0.0.1:$port" \
        "$@" "${common[@]}" 2>"$WORK/$label.err" ;;
    esac || die "$label failed: $(tail -3 "$WORK/$label.err")"
}

# A row: load, answered qps, RTT p50/p99, and for a link: packets/s forwarded, lateness
# p50/p99/max, forwarder CPU per packet; generator CPU per answer.
row() {
    local label="$1" load="$2"
    jq -r --arg load "$load" '
        def us: . / 1000 | . * 10 | round / 10;
        [$load, (.qps.answered | round),
         (.latency.p50_ns | us), (.latency.p99_ns | us),
         (if .link then ((.link.up.packets_out + .link.down.packets_out) / .duration_s | round) else "-" end),
         (if .link then "\(.link.lateness.p50_ns | us) / \(.link.lateness.p99_ns | us) / \(.link.lateness.max_ns | us)" else "-" end),
         (if .link then (.link.forwarder_cpu_s * 1e6 / ((.link.up.packets_out + .link.down.packets_out) | if . == 0 then 1 else . end) | . * 100 | round / 100) else "-" end),
         (.generator.cpu_us_per_answer | . * 100 | round / 100)]
        | "| " + (map(tostring) | join(" | ")) + " |"' "$WORK/$label.json"
}

# The capacity: the most packets per second forwarded in a run whose lateness p99 stayed under
# 100 us and that carried its load: an open-loop rate of RATES answered in full (98 %: 4g
# loses 0.5 % of the queries), or the closed loop (saturated). The lateness alone does not
# see packets that wait in the TUN device's queue before the forwarder reads them: a rate the
# forwarder cannot keep up with shows as answers missing and a round trip of queueing.
capacity() {
    local best=0 r pps
    for r in $RATES closed; do
        if [ "$(jq --arg r "$r" '.link.lateness.p99_ns < 100000 and .totals.answered > 0
                and ($r == "closed" or .qps.answered >= ($r | tonumber) * 0.98)' "$WORK/$1-$r.json")" = true ]; then
            pps="$(jq '(.link.up.packets_out + .link.down.packets_out) / .duration_s | round' "$WORK/$1-$r.json")"
            [ "$pps" -gt "$best" ] && best="$pps"
        fi
    done
    echo "$best"
}

# The load of a rate: an open-loop rate, or the closed loop of 200.
load_of() { if [ "$1" = closed ]; then echo "-c 200"; else echo "-Q $1"; fi; }

load_avg="$(cut -d' ' -f1-3 /proc/loadavg)"
ROUND_LOADS=()
for round in $(seq 1 "$REPEAT"); do
    round_load="$(cut -d' ' -f1 /proc/loadavg)"
    for DEV in $DEVICES; do
        log "round $round, device $DEV: link (none), link 4g, link alone at $RATES, closed loop of 200"
        for r in $RATES closed; do
            # shellcheck disable=SC2046
            one "$DEV-$round-none-$r" link "" $(load_of "$r")
            # shellcheck disable=SC2046
            one "$DEV-$round-4g-$r" link 4g $(load_of "$r")
            # shellcheck disable=SC2046
            one "$DEV-$round-alone-$r" alone "" $(load_of "$r")
            # shellcheck disable=SC2046
            one "$DEV-$round-alone4g-$r" alone 4g $(load_of "$r")
        done
    done
    if [ "$round" = 1 ]; then
        log "veth pair and loopback at $RATES, closed loop of 200"
        for r in $RATES closed; do
            # shellcheck disable=SC2046
            one "veth-$r" veth "" $(load_of "$r")
            # shellcheck disable=SC2046
            one "direct-$r" direct "" $(load_of "$r")
        done
    fi
    ROUND_LOADS+=("$round_load-$(cut -d' ' -f1 /proc/loadavg)")
done
stop_pid "$SERVE_PID"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# The forwarder's CPU per packet where it had a core to itself, at its busiest row of PREFIX.
us_alone_of() {
    local r
    for r in $RATES closed; do
        jq '[(.link.up.packets_out + .link.down.packets_out), .link.forwarder_cpu_s] | @tsv' -r "$WORK/$1-$r.json"
    done | sort -n | tail -1 | awk '{ printf "%.2f", $2 * 1e6 / $1 }'
}
per_core() { awk -v u="$1" 'BEGIN { if (u > 0) printf "%.0f", 1e6 / u; else print "-" }'; }
min_max() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { print (a == b ? a : a " - " b) }'; }

{
    echo "### The emulated link's capacity"
    echo
    echo "\`volley run\` over UDP, ${DURATION} s per row, generator and forwarder on core $CLIENT_CORE," \
        "\`volley serve -T 1\` on core $SERVER_CORE; link device(s) $DEVICES, $REPEAT round(s)" \
        "(the table: round 1). Load average before $load_avg, after $load_after." \
        "$(machine_line)."
    echo
    echo "| path | load (qps) | answered qps | RTT p50 us | RTT p99 us | packets/s forwarded | lateness p50 / p99 / max us | forwarder CPU us/packet | generator CPU us/answer |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    for DEV in $DEVICES; do
        for kind in none 4g alone alone4g; do
            for r in $RATES closed; do
                case "$kind" in
                    none) name="link ($DEV), no impairment" ;;
                    alone) name="link ($DEV), no impairment, forwarder alone on core $SERVER_CORE" ;;
                    alone4g) name="link ($DEV), 4g, forwarder alone on core $SERVER_CORE" ;;
                    4g) name="link ($DEV), 4g" ;;
                esac
                echo "| $name $(row "$DEV-1-$kind-$r" "${r/closed/closed loop 200}")"
            done
        done
    done
    for kind in veth direct; do
        for r in $RATES closed; do
            case "$kind" in veth) name="veth pair" ;; direct) name="loopback" ;; esac
            echo "| $name $(row "$kind-$r" "${r/closed/closed loop 200}")"
        done
    done
    echo
    veth="$(jq '.qps.answered * 2 | round' "$WORK/veth-closed.json")"
    echo "Capacity: the most packets/s forwarded above with p99 lateness under 100 us, its load carried." \
        "\"Alone\": the forwarder by itself on core $SERVER_CORE (the generator and the server sharing core" \
        "$CLIENT_CORE), its CPU per packet at its busiest row, and the packets/s one core of its own would" \
        "forward at that cost. The veth pair's closed loop carried $veth packets/s. With xdp, the" \
        "kernel's receive work into the forwarder's socket (the XDP program, the copy into the UMEM)" \
        "runs in the sending thread's context (the generator's, the server's), not the forwarder's:" \
        "the generator's CPU per answer shows what moved to it."
    echo
    echo "| device | round | load average (1 min, start-end) | capacity, no impairment | capacity, 4g | alone: carried | alone: forwarder CPU us/packet | alone: one core would forward | alone, closed loop: generator CPU us/answer | alone, 4g: carried | alone, 4g: forwarder CPU us/packet |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    for DEV in $DEVICES; do
        c0=""; c4=""; ca=""; us=""; pc=""; gc=""; c4a=""; u4a=""
        for round in $(seq 1 "$REPEAT"); do
            a="$(capacity "$DEV-$round-none")"; b="$(capacity "$DEV-$round-4g")"; c="$(capacity "$DEV-$round-alone")"
            u="$(us_alone_of "$DEV-$round-alone")"; p="$(per_core "$u")"
            g="$(jq '.generator.cpu_us_per_answer * 100 | round / 100' "$WORK/$DEV-$round-alone-closed.json")"
            d="$(capacity "$DEV-$round-alone4g")"; e="$(us_alone_of "$DEV-$round-alone4g")"
            echo "| $DEV | $round | ${ROUND_LOADS[$((round - 1))]} | $a | $b | $c | $u | $p | $g | $d | $e |"
            c0+=" $a"; c4+=" $b"; ca+=" $c"; us+=" $u"; pc+=" $p"; gc+=" $g"; c4a+=" $d"; u4a+=" $e"
        done
        if [ "$REPEAT" -gt 1 ]; then
            echo "| $DEV | min - max | | $(echo "$c0" | min_max) | $(echo "$c4" | min_max) | $(echo "$ca" | min_max) | $(echo "$us" | min_max) | $(echo "$pc" | min_max) | $(echo "$gc" | min_max) | $(echo "$c4a" | min_max) | $(echo "$u4a" | min_max) |"
        fi
    done
    echo
    first="${DEVICES%% *}"
    g0="$(jq '.generator.cpu_us_per_answer * 100 | round / 100' "$WORK/direct-closed.json")"
    g1="$(jq '.generator.cpu_us_per_answer * 100 | round / 100' "$WORK/$first-1-none-closed.json")"
    echo "Generator CPU per answer, closed loop: $g0 us on loopback, $g1 us with --link over $first (the" \
        "forwarder thread's CPU is the link's, in its own column). With 4g the closed loop is" \
        "bound by the RTT (200 in flight over 53 ms), so its capacity comes from the open-loop rates."
} | write_fragment link_capacity
