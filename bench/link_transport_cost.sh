#!/usr/bin/env bash
# How far each transport's generator cost moves when the emulated link is in the path (issue
# 13, docs/link.md): `volley run` in a closed loop (-c INFLIGHT, one thread, on $CLIENT_CORE)
# against `volley serve -T 1` (every address, on $SERVER_CORE), once on loopback and once with
# `--link ""` (no impairment: the namespace, the TUN devices and the link's forwarder thread in
# the path, the forwarder pinned to $SERVER_CORE with the server so that it does not take the
# generator's core), ROUNDS rounds, the two paths taking turns. Reported per transport: the
# generator's CPU per answer (its worker threads: the forwarder's CPU is the link's, apart),
# min-max over the rounds, and the ratio of the link's to loopback's (worst and best round).
#
#   bash bench/link_transport_cost.sh
#   TRANSPORTS="udp dot" ROUNDS=5 bash bench/link_transport_cost.sh
#
# Env: TRANSPORTS (udp tcp dot doh2 doh3 doq), ROUNDS (3), DURATION (5 s), INFLIGHT (64),
# CLIENT_CORE (0), SERVER_CORE (1), VOLLEY (a prebuilt binary), OUT_DIR. Needs root.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRANSPORTS="${TRANSPORTS:-udp tcp dot doh2 doh3 doq}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-5}"
INFLIGHT="${INFLIGHT:-64}"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, TUN devices)"
need jq taskset ip
check_cores
volley="$(volley_bin_copy)"

taskset -c "$SERVER_CORE" "$volley" serve --listen 0.0.0.0 -p 0 -T 1 --dot-port 0 --doh-port 0 --doh3-port 0 \
    --doq-port 0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_listening doq
port_of() { awk -v t="$1" '$1 == "listening" && $2 == t { n = split($3, a, ":"); print a[n]; exit }' "$WORK/serve.out"; }

# The URL and flags of a transport (the server's certificate is self-signed: --insecure).
url_of() {
    case "$1" in
        udp) echo "udp://127.0.0.1:$(port_of udp)" ;;
        tcp) echo "tcp://127.0.0.1:$(port_of tcp)" ;;
        dot) echo "tls://127.0.0.1:$(port_of dot) --insecure" ;;
        doh2) echo "https://127.0.0.1:$(port_of doh)/dns-query --http 2 --insecure" ;;
        doh3) echo "https://127.0.0.1:$(port_of doh3)/dns-query --http 3 --insecure" ;;
        doq) echo "quic://127.0.0.1:$(port_of doq) --insecure" ;;
        *) die "unknown transport $1" ;;
    esac
}

# One run: LABEL TRANSPORT PATH (loopback or link); prints the generator's CPU per answer.
one() {
    local label="$1" t="$2" path="$3" link=()
    [ "$path" = link ] && link=(--link "" --link-seed 1)
    # shellcheck disable=SC2046 # the URL's flags are split on purpose.
    VOLLEY_LINK_CPU="$SERVER_CORE" taskset -c "$CLIENT_CORE" "$volley" run $(url_of "$t") "${link[@]}" \
        -c "$INFLIGHT" -T 1 -l "${DURATION}s" -q --progress never -o "$WORK/$label.json" 2>"$WORK/$label.err" \
        || die "$label failed: $(tail -3 "$WORK/$label.err")"
    local answered issued
    read -r answered issued < <(jq -r '[.totals.answered, .totals.issued] | @tsv' "$WORK/$label.json")
    [ "$answered" -gt 0 ] || die "$label: nothing answered"
    jq '.generator.cpu_us_per_answer * 100 | round / 100' "$WORK/$label.json"
}

declare -A LOOP LINK RATIO
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
    for t in $TRANSPORTS; do
        # The paths take turns: which one goes first alternates with the round.
        if [ $((round % 2)) = 1 ]; then order="loopback link"; else order="link loopback"; fi
        for path in $order; do
            v="$(one "$t-$path-$round" "$t" "$path")"
            log "round $round, $t over $path: generator CPU $v us per answer"
            if [ "$path" = link ]; then a="$v"; LINK[$t]+=" $v"; else b="$v"; LOOP[$t]+=" $v"; fi
        done
        RATIO[$t]+=" $(div "$a" "$b")"
    done
done
stop_pid "$SERVE_PID"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

min_max() { tr ' ' '\n' | grep -v '^$' | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { print (a == b ? a : a " - " b) }'; }
{
    echo "### The generator's cost with the link in the path"
    echo
    echo "\`volley run -c $INFLIGHT -T 1\` on core $CLIENT_CORE, ${DURATION} s per run, $ROUNDS rounds, against" \
        "\`volley serve -T 1\` on core $SERVER_CORE; the link \`--link \"\"\` (no impairment), its" \
        "forwarder on core $SERVER_CORE. Load average before $load_before, after $load_after. $(machine_line)."
    echo
    echo "| transport | generator CPU µs/answer, loopback (min - max) | with --link (min - max) | link / loopback, per round (min - max) |"
    echo "| --- | ---: | ---: | ---: |"
    for t in $TRANSPORTS; do
        echo "| $t | $(echo "${LOOP[$t]}" | min_max) | $(echo "${LINK[$t]}" | min_max) | $(echo "${RATIO[$t]}" | min_max) |"
    done
} | write_fragment link_transport_cost
