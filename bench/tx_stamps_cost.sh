#!/usr/bin/env bash
# What the kernel transmit stamps cost the generator (issue 21): `volley run` over UDP at a
# fixed rate against `volley serve`, with `--tx-stamps on` and `--tx-stamps off` side by side,
# ROUNDS times (the order alternating), generator CPU per answer from the results (the worker
# threads' CPU clocks: the error queue's reads are the thread's system calls). Prints each
# round, and the ratio on/off of each round with its min-max over the rounds.
#
# Env: RATE (100000 qps), DURATION (5 s per run), ROUNDS (3), CLIENT_CORE (0), SERVER_CORE
# (1), VOLLEY (a prebuilt binary), VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE="${RATE:-100000}"
DURATION="${DURATION:-5}"
ROUNDS="${ROUNDS:-3}"

need taskset jq
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
start_responder "$VOLLEY_BIN"
wait_answers "$SERVE_UDP" www.example.test udp

# One run: prints "cpu_us_per_answer answered_qps sent kernel fallback generator_p50_ns service_p50_ns".
one() {
    local stamps="$1" label="$2"
    taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "udp://127.0.0.1:$SERVE_UDP" -Q "$RATE" -l "${DURATION}s" -T 1 \
        --tx-stamps "$stamps" --progress never -o "$WORK/$label.json" >"$WORK/$label.out" 2>&1 \
        || die "volley run ($label) failed: $(tail -5 "$WORK/$label.out")"
    jq -r '[.generator.cpu_us_per_answer, .qps.answered, .totals.sent, (.send_stamps.kernel // 0),
        (.send_stamps.fallback // 0), (.generator_delay.p50_ns // 0), (.service_time.p50_ns // 0)] | @tsv' \
        "$WORK/$label.json"
}

declare -a ON OFF RATIO
rows=""
for r in $(seq 1 "$ROUNDS"); do
    order=(on off)
    [ $((r % 2)) = 0 ] && order=(off on)
    for s in "${order[@]}"; do
        log "round $r: --tx-stamps $s, $RATE qps for ${DURATION}s"
        line="$(one "$s" "r$r-$s")"
        if [ "$s" = on ]; then ON[$r]="$line"; else OFF[$r]="$line"; fi
    done
    on_cpu="$(echo "${ON[$r]}" | cut -f1)"
    off_cpu="$(echo "${OFF[$r]}" | cut -f1)"
    RATIO[$r]="$(div "$on_cpu" "$off_cpu" %.3f)"
    rows+="| $r | $(echo "${ON[$r]}" | awk -F'\t' '{ printf "%.2f | %.0f | %d / %d", $1, $2, $4, $5 }') |"
    rows+=" $(echo "${OFF[$r]}" | awk -F'\t' '{ printf "%.2f | %.0f | %d / %d", $1, $2, $4, $5 }') | ${RATIO[$r]} |"$'\n'
done
lo="$(printf '%s\n' "${RATIO[@]}" | sort -g | head -1)"
hi="$(printf '%s\n' "${RATIO[@]}" | sort -g | tail -1)"

{
    echo "### Kernel transmit stamps: generator CPU per answer, on against off"
    echo
    echo "\`volley run udp://… -Q $RATE -l ${DURATION}s -T 1 --tx-stamps on|off\` pinned to core $CLIENT_CORE," \
        "against \`volley serve -T 1\` on core $SERVER_CORE; $ROUNDS rounds, the order alternating." \
        "CPU: the generator's worker thread per answer. Stamps: departures timed by the kernel / by volley's clock." \
        "$(machine_line); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| round | on: CPU µs/answer | on: answers/s | on: stamps | off: CPU µs/answer | off: answers/s | off: stamps | on/off |"
    echo "| ---: | ---: | ---: | --- | ---: | ---: | --- | ---: |"
    printf '%s' "$rows"
    echo
    echo "CPU on/off over the rounds: $lo–$hi (goal: at most 1.05)."
} | write_fragment tx_stamps_cost
