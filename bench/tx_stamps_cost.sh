#!/usr/bin/env bash
# What the kernel transmit stamps cost the generator (issue 21): `volley run` over UDP at a
# fixed rate against `volley serve`, with `--tx-stamps ends` (the first, the second, every 8th
# and the last datagram of each send call stamped, the others between them), `--tx-stamps each`
# (every datagram, the default) and `--tx-stamps off` side by side, ROUNDS times (the order
# rotating) after a warm-up run that is not counted, generator
# CPU per answer from the results (the worker threads' CPU clocks: the error queue's reads are
# the thread's system calls). Prints each round, and the ratios ends/off and each/off of each
# round with their min-max over the rounds, median, and mean with a 95 % interval. A cost of a
# few per cent needs many short rounds: DURATION=1 ROUNDS=40 (docs/performance.md).
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

# One run: prints "cpu_us_per_answer answered_qps sent kernel between fallback generator_p50_ns service_p50_ns".
one() {
    local stamps="$1" label="$2"
    taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "udp://127.0.0.1:$SERVE_UDP" -Q "$RATE" -l "${DURATION}s" -T 1 \
        --tx-stamps "$stamps" --progress never -o "$WORK/$label.json" >"$WORK/$label.out" 2>&1 \
        || die "volley run ($label) failed: $(tail -5 "$WORK/$label.out")"
    jq -r '[.generator.cpu_us_per_answer, .qps.answered, .totals.sent, (.send_stamps.kernel // 0),
        (.send_stamps.between // 0), (.send_stamps.fallback // 0), (.generator_delay.p50_ns // 0),
        (.service_time.p50_ns // 0)] | @tsv' "$WORK/$label.json"
}

cell() { echo "$1" | awk -F'\t' '{ printf "%.2f | %.0f | %d / %d / %d", $1, $2, $4, $5, $6 }'; }

# A warm-up run, not counted: the first run after the responder starts read up to 1.4x the
# others (2026-12-03, round 1 of five).
log "warm-up: --tx-stamps off, $RATE qps for ${DURATION}s (not counted)"
one off warm-up >/dev/null

declare -A RUN
declare -a ENDS EACH
rows=""
modes=(ends each off)
for r in $(seq 1 "$ROUNDS"); do
    k=$(((r - 1) % 3))
    order=("${modes[@]:$k}" "${modes[@]:0:$k}")
    for s in "${order[@]}"; do
        log "round $r: --tx-stamps $s, $RATE qps for ${DURATION}s"
        RUN[$r,$s]="$(one "$s" "r$r-$s")"
    done
    off_cpu="$(echo "${RUN[$r,off]}" | cut -f1)"
    ENDS[$r]="$(div "$(echo "${RUN[$r,ends]}" | cut -f1)" "$off_cpu" %.3f)"
    EACH[$r]="$(div "$(echo "${RUN[$r,each]}" | cut -f1)" "$off_cpu" %.3f)"
    rows+="| $r | $(cell "${RUN[$r,ends]}") | $(cell "${RUN[$r,each]}") | $(cell "${RUN[$r,off]}") | ${ENDS[$r]} | ${EACH[$r]} |"$'\n'
done
span() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- | sed 's/-/–/'; }
# The rounds' ratios summed up: their median, and their mean with a 95 % interval (1.96
# standard errors; the machine's noise moves one run by up to 30 %, so a cost of a few per cent
# shows only over many short rounds, taken in turn).
summary() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1; s += $1; q += $1 * $1 }
        END { n = NR; m = s / n; v2 = n > 1 ? (q - n * m * m) / (n - 1) : 0; sd = v2 > 0 ? sqrt(v2) : 0; h = 1.96 * sd / sqrt(n)
              med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
              printf "median %.3f, mean %.3f (95 %% interval %.3f-%.3f, %d rounds)", med, m, m - h, m + h, n }'
}

{
    echo "### Kernel transmit stamps: generator CPU per answer, ends and each against off"
    echo
    echo "\`volley run udp://… -Q $RATE -l ${DURATION}s -T 1 --tx-stamps ends|each|off\` pinned to core $CLIENT_CORE," \
        "against \`volley serve -T 1\` on core $SERVER_CORE; a warm-up run not counted, then $ROUNDS rounds, the order rotating." \
        "CPU: the generator's worker thread per answer. Stamps: departures timed by their own kernel stamp / between two / by volley's clock." \
        "$(machine_line); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| round | ends: CPU µs/answer | answers/s | stamps | each: CPU µs/answer | answers/s | stamps | off: CPU µs/answer | answers/s | stamps | ends/off | each/off |"
    echo "| ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"
    printf '%s' "$rows"
    echo
    echo "CPU ends/off over the rounds: $(span "${ENDS[@]}"); each/off: $(span "${EACH[@]}") (goal: at most 1.05)."
    echo
    echo "ends/off: $(summary "${ENDS[@]}"); each/off: $(summary "${EACH[@]}")."
} | write_fragment tx_stamps_cost
