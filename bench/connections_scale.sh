#!/usr/bin/env bash
# Many open DoT connections from one generator process: memory per connection of the generator
# and of the responder, and whether the generator's CPU per query stays flat as the number of
# open connections grows (issue 4: at most 20 KiB per connection; CPU per query within 20 %
# from 1,000 connections up).
#
# For each N in COUNTS: a fresh `volley serve -T THREADS --dot-port 0`, then `volley run tls://…
# --connections N --rate RATE -T THREADS` for DURATION s: the N connection slots take queries in turn,
# so every connection is open after N/RATE s and then carries one query every N/RATE s (mostly
# idle). Once all are open (ss counts them), generator CPU and answered queries are taken over
# a steady window, and both processes' resident memory (VmRSS) at its end. Memory per
# connection is (RSS − RSS of the same run with BASE connections) / (N − BASE).
#
# The open-files limit (ulimit -Hn) bounds the connections of each descriptor table: each
# connection is one descriptor in each process, and every generator worker and every responder
# I/O thread has a table of its own. THREADS workers on each side (one core each all the same)
# hold up to THREADS times the limit; beyond 20,000 connections the generator spreads them
# over the source addresses of BIND (one address has about 28,000 ports towards one server).
#
# Env: COUNTS ("1000 5000 10000 18000"), BASE (10), RATE (2000), DURATION (40), THREADS (1),
# BIND (127.0.1.0/24 when a count is over 20,000), CLIENT_CORE (0), SERVER_CORE (1),
# TRANSPORT (dot, or tcp), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COUNTS="${COUNTS:-1000 5000 10000 18000}"
TRANSPORT="${TRANSPORT:-dot}"
case "$TRANSPORT" in
    dot) LABEL=DoT ;;
    tcp) LABEL=TCP ;;
    *) die "TRANSPORT=$TRANSPORT: dot or tcp" ;;
esac
BASE="${BASE:-10}"
RATE="${RATE:-2000}"
DURATION="${DURATION:-40}"
THREADS="${THREADS:-1}"
export SERVE_THREADS="$THREADS"
BIND="${BIND:-}"
for n in $COUNTS; do
    [ "$n" -gt 20000 ] && [ -z "$BIND" ] && BIND=127.0.1.0/24
done
BIND_ARGS=()
[ -n "$BIND" ] && BIND_ARGS=(--bind "$BIND")

need taskset jq ss
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
QUERIES="$(write_queries)"
CA="$WORK/ca.pem"
HARD="$(ulimit -Hn)"

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
now_ms() { date +%s%3N; }
established() { ss -Htn state established "( dport = :$1 )" | wc -l; }

# One N: writes "n established gen_rss_kib srv_rss_kib cpu_us_per_answer answers_in_window" to
# $WORK/row_N (run in this shell, not a subshell, so that the exit trap stops its processes).
one() {
    local n="$1"
    start_responder "$VOLLEY_BIN" --dot-port 0 --ca-out "$CA" --idle-timeout 10m
    local port srv0 scheme=tls
    port="$(serve_port dot)"
    if [ "$TRANSPORT" = tcp ]; then
        port="$SERVE_TCP"
        scheme=tcp
    fi
    wait_url_answers "$VOLLEY_BIN" "$scheme://127.0.0.1:$port" --ca "$CA"
    srv0="$(rss_kib "$SERVE_PID")"
    taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "$scheme://127.0.0.1:$port" --ca "$CA" -d "$QUERIES" \
        --connections "$n" --rate "$RATE" -l "${DURATION}s" -T "$THREADS" -t 10s "${BIND_ARGS[@]}" \
        --progress never -q -o "$WORK/run_$n.json" >"$WORK/run_$n.out" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    # Wait (bounded by the run) until every connection is established.
    local deadline=$(($(date +%s) + DURATION - 6)) est=0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        est="$(established "$port")"
        [ "$est" -ge "$n" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    [ "$est" -ge "$n" ] || log "warning: only $est of $n connections established before the window"
    sleep 2
    local t1 c1 t2 c2 grss srss
    t1="$(now_ms)"
    c1="$(proc_cpu_s "$pid")"
    local left=$((deadline + 4 - $(date +%s)))
    [ "$left" -gt 3 ] || die "N=$n: no steady window left (all connections took too long to open; raise DURATION)"
    sleep "$((left - 1))"
    t2="$(now_ms)"
    c2="$(proc_cpu_s "$pid")"
    grss="$(rss_kib "$pid")"
    srss="$(rss_kib "$SERVE_PID")"
    est="$(established "$port")"
    wait "$pid" || die "volley run failed: $(tail -5 "$WORK/run_$n.out")"
    stop_pid "$SERVE_PID"
    local start s1 s2 answers
    start="$(jq -r '.started_unix_ms' "$WORK/run_$n.json")"
    s1=$(((t1 - start) / 1000 + 1))
    s2=$(((t2 - start) / 1000 - 1))
    answers="$(jq --argjson a "$s1" --argjson b "$s2" '[.series[] | select(.second >= $a and .second <= $b) | .answered] | add // 0' "$WORK/run_$n.json")"
    local secs cpu_in_window
    secs="$(calc '(b - a) / 1000' a="$t1" b="$t2")"
    # CPU of the whole-second part of the window, scaled to the seconds counted.
    cpu_in_window="$(calc '(d - c) * (s2 - s1 + 1) / t' c="$c1" d="$c2" s1="$s1" s2="$s2" t="$secs")"
    local p50
    p50="$(jq -r '.latency.p50_ns / 1000 | floor' "$WORK/run_$n.json")"
    echo "$n $est $grss $((srss - srv0)) $(div "$(calc 'c * 1e6' c="$cpu_in_window")" "$answers") $answers $p50" >"$WORK/row_$n"
}

declare -A R
log "open-files hard limit: $HARD; counts: $BASE $COUNTS"
for n in $BASE $COUNTS; do
    [ "$((n / THREADS + 300))" -le "$HARD" ] || die "N=$n over $THREADS thread(s) needs more than the open-files hard limit $HARD per thread; raise THREADS"
    log "N=$n: $RATE qps over $n $LABEL connections for ${DURATION}s"
    one "$n"
    R[$n]="$(cat "$WORK/row_$n")"
    log "N=$n: ${R[$n]}"
done

field() { echo "${R[$1]}" | awk -v i="$2" '{ print $i }'; }
first="$(echo "$COUNTS" | awk '{ print $1 }')"
{
    echo "### Open $LABEL connections: memory per connection and CPU per query"
    echo
    echo "\`volley run $TRANSPORT://… --connections N --rate $RATE -T $THREADS${BIND:+ --bind $BIND}\` on core $CLIENT_CORE against a fresh" \
        "\`volley serve -T $THREADS --dot-port 0\` on core $SERVER_CORE for each N, ${DURATION} s; every connection" \
        "open (counted by \`ss\`) before a steady window in which generator CPU (\`/proc\`) and answers" \
        "(the per-second series) are taken; resident memory (VmRSS) at the end of the window, per" \
        "connection against a run with $BASE connections (responder: against itself before the run)." \
        "Sessions resumed (the default). Open-files hard limit here: $HARD. $(machine_line)."
    echo
    echo "| connections | established | generator RSS MiB | generator KiB per connection | responder KiB per connection | generator CPU µs per answer | vs $first connections | answers per generator CPU-s | latency p50 µs |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for n in $COUNTS; do
        g="$(calc '(g - b) / (n - m)' g="$(field "$n" 3)" b="$(field "$BASE" 3)" n="$n" m="$BASE")"
        s="$(calc 's / n' s="$(field "$n" 4)" n="$n")"
        printf '| %s | %s | %.1f | %.1f | %.1f | %s | %s | %s | %s |\n' "$n" "$(field "$n" 2)" \
            "$(calc 'g / 1024' g="$(field "$n" 3)")" "$g" "$s" "$(field "$n" 5)" \
            "$(div "$(field "$n" 5)" "$(field "$first" 5)")" "$(div 1e6 "$(field "$n" 5)" %.0f)" "$(field "$n" 7)"
    done
} | write_fragment "connections_scale_$TRANSPORT"
