#!/usr/bin/env bash
# A run split into parts (docs/scale-out.md): what coordination costs.
#
#   bash bench/scale_out.sh                      # RATE=50000 DURATION=5 PARTS_LIST="2 5 10 20 50"
#   HOT_PATH=0 SKEW_RUNS=3 PARTS_LIST=7 bash bench/scale_out.sh   # the start skew of 7 parts, 3 times
#
# 1. The hot path: one part's CPU per answer with and without a coordinator (the same UDP run at
#    RATE on one generator core, as `--parts 1 --coordinator` and as a plain run): the worker
#    threads' CPU (the results' generator.cpu_us_per_answer) and the whole process's (user + sys,
#    which counts the coordinator's messages on the collecting thread).
# 2. The start skew and the coordinator's CPU per part per second for each N of PARTS_LIST:
#    N parts on this machine (sharing its cores), each at PART_RATE qps for DURATION s.
# 3. The merge's cost for the N parts' files (volley merge, wall clock and CPU).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RATE="${RATE:-50000}"
DURATION="${DURATION:-5}"
PART_RATE="${PART_RATE:-200}"
PARTS_LIST="${PARTS_LIST:-2 5 10 20 50}"
HOT_PATH="${HOT_PATH:-1}"     # 0: leave out part 1 (the hot path)
SKEW_RUNS="${SKEW_RUNS:-1}"   # runs of each N in part 2
need /usr/bin/time jq taskset
check_cores
volley="$(volley_bin_copy)"
start_responder "$volley"
url="udp://127.0.0.1:$SERVE_UDP"

coordinate() { # N OUT: starts a coordinator, sets COORD_PID and COORD_ADDR
    local n="$1" out="$2"
    rm -f "$out" "$out.err" "$out.time"
    /usr/bin/time -f '%U %S' -o "$out.time" "$volley" coordinate --parts "$n" --listen 127.0.0.1:0 -o "$out" -q \
        2>"$out.err" &
    COORD_PID=$!
    PIDS+=("$COORD_PID")
    local i
    for i in $(seq 1 100); do
        COORD_ADDR="$(sed -n 's/.*listening on \([0-9.:]*\);.*/\1/p' "$out.err")"
        [ -n "$COORD_ADDR" ] && return 0
        sleep 0.1
    done
    die "the coordinator printed no address: $(cat "$out.err")"
}

rows=()
modes="plain coordinated"
[ "$HOT_PATH" = 0 ] && modes=""
[ -n "$modes" ] && log "hot path: $url at $RATE qps for ${DURATION}s, plain and with a coordinator"
for mode in $modes; do
    for rep in 1 2 3; do
        extra=()
        if [ "$mode" = coordinated ]; then
            coordinate 1 "$WORK/hot-m$rep.json"
            extra=(--parts 1 --coordinator "$COORD_ADDR")
        fi
        measure "hot-$mode-$rep" "$volley" run "$url" -Q "$RATE" -l "${DURATION}s" -T 1 "${extra[@]}" -q \
            --progress never -o "$WORK/hot-$mode-$rep.json"
        [ "$mode" = coordinated ] && { wait "$COORD_PID" || true; }
        [ -s "$WORK/hot-$mode-$rep.json" ] || die "$mode run $rep wrote no results: $(tail -3 "$WORK/hot-$mode-$rep.err")"
        ans="$(jq '.totals.answered' "$WORK/hot-$mode-$rep.json")"
        workers="$(jq '.generator.cpu_us_per_answer' "$WORK/hot-$mode-$rep.json")"
        proc="$(calc 'c * 1e6 / a' c="$(cat "$WORK/hot-$mode-$rep.cpu")" a="$ans")"
        sent="$(jq '.totals.sent' "$WORK/hot-$mode-$rep.json")"
        rows+=("| $mode | $rep | $ans of $sent | $(printf '%.2f' "$workers") | $(printf '%.2f' "$proc") |")
    done
done

log "coordination: parts at $PART_RATE qps each for ${DURATION}s"
skew_rows=()
for n in $(for n in $PARTS_LIST; do for r in $(seq 1 "$SKEW_RUNS"); do echo "$n"; done; done); do
    coordinate "$n" "$WORK/m$n.json"
    part_pids=()
    rm -f "$WORK"/m"$n"-part-*.json
    for i in $(seq 0 $((n - 1))); do
        "$volley" run "$url" -Q "$((PART_RATE * n))" -l "${DURATION}s" -T 1 --parts "$n" --coordinator "$COORD_ADDR" \
            -q --progress never -o "$WORK/m$n-part-{part}.json" 2>>"$WORK/m$n.parts.err" &
        part_pids+=($!)
        PIDS+=($!)
    done
    for p in "${part_pids[@]}"; do wait "$p" || die "a part of $n failed: $(tail -3 "$WORK/m$n.parts.err")"; done
    wait "$COORD_PID" || die "the coordinator of $n failed: $(tail -3 "$WORK/m$n.json.err")"
    skew="$(jq '.scale.start_skew_ns / 1e6' "$WORK/m$n.json")"
    late="$(jq '[.scale.part_list[].start_offset_ns] | sort | .[length/2|floor] / 1e6' "$WORK/m$n.json")"
    offs="$(jq '[.scale.part_list[].clock_offset_ns | fabs] | max / 1e3' "$WORK/m$n.json")"
    complete="$(jq '.scale.complete' "$WORK/m$n.json")"
    read -r cu cs <"$WORK/m$n.json.time"
    elapsed="$(jq '.elapsed_s' "$WORK/m$n.json")"
    per="$(calc '(u + s) * 1e6 / (n * (d + 1))' u="$cu" s="$cs" n="$n" d="$elapsed")"
    mstart="$(date +%s.%N)"
    /usr/bin/time -f '%U %S' -o "$WORK/merge$n.time" "$volley" merge "$WORK"/m"$n"-part-*.json -o "$WORK/merge$n.json" \
        2>/dev/null || die "merge of $n failed"
    mwall="$(calc 'b - a' a="$mstart" b="$(date +%s.%N)")"
    read -r mu ms <"$WORK/merge$n.time"
    size="$(du -k "$WORK/m$n-part-0.json" | cut -f1)"
    skew_rows+=("| $n | $complete | $(printf '%.3f' "$skew") | $(printf '%.3f' "$late") | $(printf '%.1f' "$offs") | $(printf '%.0f' "$per") | $(printf '%.2f' "$mwall") s ($(calc 'u + s' u="$mu" s="$ms") s CPU, ${size} KiB each) |")
done
stop_pid "$SERVE_PID"

{
    echo "### Scale out: what coordination costs"
    echo
    echo "\`bash bench/scale_out.sh\` (RATE=$RATE, DURATION=$DURATION, PART_RATE=$PART_RATE); \`volley serve -T 1\` on"
    echo "core $SERVER_CORE. $(machine_line)."
    echo
    if [ -n "$modes" ]; then
        echo "One part at $RATE qps over UDP on core $CLIENT_CORE, plain and with a coordinator (\`--parts 1"
        echo "--coordinator\`): CPU per answer of the worker threads and of the whole process."
        echo
        echo "| run | rep | answered of sent | workers µs/answer | process µs/answer |"
        echo "| --- | ---: | ---: | ---: | ---: |"
        printf '%s\n' "${rows[@]}"
        echo
    fi
    echo "N parts on this machine (sharing its cores), $PART_RATE qps each: the start skew (latest actual"
    echo "start minus earliest), the median part's start against the one given, the largest clock offset"
    echo "measured, the coordinator's CPU per part per second of the run, and \`volley merge\` of the"
    echo "N part files."
    echo
    echo "| parts | complete | skew ms | median start ms | max offset µs | coordinator µs CPU per part-second | merge |"
    echo "| ---: | --- | ---: | ---: | ---: | ---: | --- |"
    printf '%s\n' "${skew_rows[@]}"
} | write_fragment scale_out
