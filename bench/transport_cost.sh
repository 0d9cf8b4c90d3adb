#!/usr/bin/env bash
# Each transport's cost relative to UDP on the same responder: the shape of seeds/000's figure 2
# (QPS per protocol on persistent connections, against UDP) and seeds/004's table (UDP, TCP, TLS,
# HTTPS with and without kept connections). Runs `volley bench` (embedded responder, closed loop)
# twice: persistent connections, then --fresh (one query per connection), and reads its
# volley.bench/1 JSON.
#
# `volley bench` is one process: its generator (-T 1) and its responder (--responder-threads 1)
# share the two cores $CLIENT_CORE,$SERVER_CORE (taskset), so qps is the pace of the pair; the
# generator CPU per answer counts the generator's threads only.
#
# Env: DURATION (10 s per transport and mode), INFLIGHT (64), TRANSPORTS
# ("udp,tcp,dot,doh1,doh2,doh3,doq"), FRESH (1: also the --fresh pass; 0: persistent only),
# CLIENT_CORE (0), SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
INFLIGHT="${INFLIGHT:-64}"
TRANSPORTS="${TRANSPORTS:-udp,tcp,dot,doh1,doh2,doh3,doq}"
FRESH="${FRESH:-1}"

need taskset jq
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
CORES="$CLIENT_CORE,$SERVER_CORE"
[ "$CLIENT_CORE" != "$SERVER_CORE" ] || CORES="$CLIENT_CORE"

modes=(persistent)
[ "$FRESH" = "1" ] && modes+=(fresh)
for mode in "${modes[@]}"; do
    flag=()
    [ "$mode" = fresh ] && flag=(--fresh)
    log "volley bench ($mode) on cores $CORES: $TRANSPORTS, ${DURATION}s each, $INFLIGHT in flight"
    taskset -c "$CORES" "$VOLLEY_BIN" bench --transports "$TRANSPORTS" -l "${DURATION}s" -c "$INFLIGHT" \
        -T 1 --responder-threads 1 "${flag[@]}" --progress never -o "$WORK/$mode.json" \
        >"$WORK/$mode.out" 2>&1 || die "volley bench ($mode) failed: $(tail -5 "$WORK/$mode.out")"
    schema="$(jq -r '.schema' "$WORK/$mode.json")"
    [ "$schema" = "volley.bench/1" ] || log "warning: $mode results have schema '$schema', expected volley.bench/1"
done

# One TSV line per transport of a results file:
# transport qps cpu_us bytes pkts answered_ratio server_cpu_us.
rows() {
    jq -r '.rows[] | [.transport, .qps, (.cpu_us_per_answer // 0), (.bytes_per_query // 0),
        (.packets_per_query // 0), (.answered_ratio // 0), (.target_cpu_us_per_answer // 0)] | @tsv' "$1"
}
declare -A P F
while IFS=$'\t' read -r t qps cpu bytes pkts ans srv; do
    P[$t]="$qps $cpu $bytes $pkts $ans $srv"
done < <(rows "$WORK/persistent.json")
if [ "$FRESH" = "1" ]; then
    while IFS=$'\t' read -r t qps cpu bytes pkts ans srv; do
        F[$t]="$qps $cpu $bytes $pkts $ans $srv"
    done < <(rows "$WORK/fresh.json")
fi
get() { # get ARRAY-NAME TRANSPORT FIELD
    local -n arr="$1"
    echo "${arr[$2]:-}" | awk -v i="$3" '{ print $i }'
}

udp_qps="$(get P udp 1)"
udp_cpu="$(get P udp 2)"
udp_srv="$(get P udp 6)"
fudp_srv="$(get F udp 6)"
fudp_srv="${fudp_srv:-$udp_srv}"
fudp_qps="$(get F udp 1)"
fudp_qps="${fudp_qps:-$udp_qps}"
[ -n "$udp_qps" ] || log "warning: no udp row: ratios to UDP are n/a"

{
    echo "### Each transport's cost relative to UDP (\`volley bench\`)"
    echo
    echo "\`volley bench -T 1 --responder-threads 1 -c $INFLIGHT -l ${DURATION}s\` pinned to cores $CORES" \
        "(generator and embedded responder in one process), persistent connections$([ "$FRESH" = 1 ] && echo \
        " and then \`--fresh\` (one query per connection, $INFLIGHT connections at a time)"). Generator CPU" \
        "counts the generator's threads only; server CPU the responder's threads (their CPU-time clocks); bytes and packets per answered query are both directions," \
        "headers included. \"fresh vs UDP\" divides by the UDP row of the fresh pass (UDP has no" \
        "connections: the same measurement, repeated). $(machine_line)."
    echo
    if [ "$FRESH" = "1" ]; then
        echo "| transport | qps | qps vs UDP | gen CPU µs/answer | CPU vs UDP | server CPU µs/answer | server vs UDP | B/query | fresh qps | fresh vs UDP | fresh gen CPU µs/answer | fresh server CPU µs/answer | fresh server vs UDP | fresh B/query | fresh/persistent qps |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    else
        echo "| transport | qps | qps vs UDP | gen CPU µs/answer | CPU vs UDP | server CPU µs/answer | server vs UDP | B/query |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    fi
    IFS=',' read -r -a list <<<"$TRANSPORTS"
    for t in "${list[@]}"; do
        q="$(get P "$t" 1)"; c="$(get P "$t" 2)"; b="$(get P "$t" 3)"; sv="$(get P "$t" 6)"
        line="| $t | $(printf %.0f "${q:-0}") | $(div "${q:-0}" "${udp_qps:-0}") | $(printf %.2f "${c:-0}") | $(div "${c:-0}" "${udp_cpu:-0}") | $(printf %.2f "${sv:-0}") | $(div "${sv:-0}" "${udp_srv:-0}") | $(printf %.0f "${b:-0}")"
        if [ "$FRESH" = "1" ]; then
            fq="$(get F "$t" 1)"; fc="$(get F "$t" 2)"; fb="$(get F "$t" 3)"; fs="$(get F "$t" 6)"
            line="$line | $(printf %.0f "${fq:-0}") | $(div "${fq:-0}" "${fudp_qps:-0}" %.3f) | $(printf %.2f "${fc:-0}") | $(printf %.2f "${fs:-0}") | $(div "${fs:-0}" "${fudp_srv:-0}") | $(printf %.0f "${fb:-0}") | $([ "$t" = udp ] && echo "-" || div "${fq:-0}" "${q:-0}" %.3f)"
        fi
        echo "$line |"
    done
} | write_fragment transport_cost
