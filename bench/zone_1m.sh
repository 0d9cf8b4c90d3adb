#!/usr/bin/env bash
# A zone of a million records: how long `volley serve --zone` takes to load it, what it holds in
# memory, and whether names from the zone are answered as fast as synthesised names.
#
#   bash bench/zone_1m.sh
#   RECORDS=200000 DURATION=5 ROUNDS=1 bash bench/zone_1m.sh
#
# The script writes a zone file of RECORDS records (SOA, NS, and A records h1..hN, plus a
# wildcard) and starts `volley serve -T 1 --zone FILE` on $SERVER_CORE. Load: the wall time from
# the start of the process to its `listening` lines (reading, checking and compiling the zone,
# then binding), and the responder's own "zones loaded in" figure; memory: the server's RSS once
# it listens, and the same server without the zone. Rate: the same closed loop
# (`volley run -c INFLIGHT -T 1` on $CLIENT_CORE, same flags) asks, against the same server, in
# turn: QUERIES names from the zone (h<random>.zone.test A), as many names outside it that are
# synthesised (h<random>.synth.test A, the same length), and names the zone does not hold
# (a wildcard's NODATA, and NXDOMAIN, with the SOA). Reported per kind: answered qps, the server's CPU µs per answer, and
# the ratio to the synthesised names; ROUNDS rounds, alternating, the median of each.
#
#
# GEN=xdp (root): the server runs in a network namespace behind a veth pair and the generator is
# `volley run --xdp -Q RATE` (AF_XDP, a fixed rate in the open loop) instead of the closed loop
# over sockets. Over sockets the one-thread generator costs more per query than the server, so
# the closed loop's rate is the generator's and its rounds scatter with it; through AF_XDP the
# generator is cheaper than the server and every kind gets the same offered load, so the
# server's CPU per answer (what bounds its rate on one core) is read at an equal load.
#
# Env: RECORDS (1000000), QUERIES (100000 names per kind), DURATION (10 s per run), ROUNDS (3),
# INFLIGHT (200), GEN (sockets; or xdp), RATE (xdp: 200000 qps), CLIENT_CORE (0), SERVER_CORE
# (1), VOLLEY (a prebuilt binary), OUT_DIR.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RECORDS="${RECORDS:-1000000}"
QUERIES="${QUERIES:-100000}"
DURATION="${DURATION:-10}"
ROUNDS="${ROUNDS:-3}"
INFLIGHT="${INFLIGHT:-200}"
GEN="${GEN:-sockets}"
RATE="${RATE:-200000}"
need kdig taskset jq awk
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
case "$GEN" in
    sockets)
        LOAD=(-c "$INFLIGHT")
        LOAD_LINE="\`volley run -c $INFLIGHT -T 1\` (closed loop over sockets)"
        ;;
    xdp)
        veth_namespace
        LOAD=(--xdp "$HOST" -Q "$RATE" --connections 4 -t 1s)
        LOAD_LINE="\`volley run --xdp -Q $RATE -T 1\` (AF_XDP over a veth pair into the server's namespace, a fixed rate)"
        ;;
    *) die "GEN is sockets or xdp, not '$GEN'" ;;
esac

ZONE="$WORK/zone.test.zone"
hosts=$((RECORDS - 3))
log "writing a zone of $RECORDS records ($hosts A records)"
awk -v n="$hosts" 'BEGIN {
    print "$ORIGIN zone.test."
    print "$TTL 300"
    print "@ IN SOA ns1 hostmaster 1 7200 900 1209600 60"
    print "@ IN NS ns1"
    print "* IN TXT \"wildcard\""
    for (i = 1; i <= n; i++) printf "h%d IN A 10.%d.%d.%d\n", i, int(i / 65536) % 256, int(i / 256) % 256, i % 256
}' >"$ZONE"
# The SOA, NS and wildcard TXT make 3 records; ns1 has none (it is only named).
zone_mib="$(du -m "$ZONE" | cut -f1)"

# The same names, in the same random order, under the zone and outside it.
awk -v n="$hosts" -v q="$QUERIES" 'BEGIN { srand(42); for (i = 0; i < q; i++) print int(1 + rand() * n) }' >"$WORK/picks"
awk '{ print "h" $1 ".zone.test A" }' "$WORK/picks" >"$WORK/zone.txt"
awk '{ print "h" $1 ".synth.test A" }' "$WORK/picks" >"$WORK/synth.txt"
# Names the zone does not hold: one label under the apex, the wildcard's (it has TXT only, so
# AAAA is NODATA with the SOA); two labels, under a host (NXDOMAIN with the SOA).
awk '{ print "x" $1 ".zone.test AAAA" }' "$WORK/picks" >"$WORK/wild.txt"
awk '{ print "a.h" $1 ".zone.test A" }' "$WORK/picks" >"$WORK/nx.txt"

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# Load: wall time to the listening lines, and the server's own figure.
t0="$(date +%s.%N)"
start_responder "$VOLLEY_BIN" --zone "$ZONE"
t1="$(date +%s.%N)"
load_wall="$(calc 'b - a' a="$t0" b="$t1")"
load_own="$(awk '/^zones loaded in/ { print $4 }' "$WORK/serve.err")"
zone_line="$(grep '^zone ' "$WORK/serve.err" || true)"
rss_zone="$(rss_kib "$SERVE_PID")"
log "loaded: $zone_line; $load_own s by its own clock, $load_wall s to listening; RSS $rss_zone KiB"
wait_answers "$SERVE_UDP" h1.zone.test
PORT="$SERVE_UDP"

KINDS="synth zone wild nx"
declare -A QPS CPU WANT=([synth]=NOERROR [zone]=NOERROR [wild]=NOERROR [nx]=NXDOMAIN)
for kind in $KINDS; do QPS[$kind]=""; CPU[$kind]=""; done
for round in $(seq 1 "$ROUNDS"); do
    for kind in $KINDS; do
        log "round $round: $kind names, volley run ${LOAD[*]} for ${DURATION}s"
        out="$WORK/$kind.$round"
        cpu0="$(proc_cpu_s "$SERVE_PID")"
        taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "udp://${SERVE_IP:-127.0.0.1}:$PORT" -d "$WORK/$kind.txt" \
            "${LOAD[@]}" -l "${DURATION}s" -T 1 --progress never -q -o "$out.json" >"$out.out" 2>&1 \
            || die "volley run ($kind) failed: $(tail -5 "$out.out")"
        cpu1="$(proc_cpu_s "$SERVE_PID")"
        read -r done secs < <(volley_stats "$out.json")
        want="${WANT[$kind]}"
        got="$(jq -r --arg r "$want" '.totals.rcodes[$r] // 0' "$out.json")"
        [ "$got" = "$done" ] || die "$kind: $done answered, only $got $want: $(jq -c .totals.rcodes "$out.json")"
        QPS[$kind]+="$(div "$done" "$secs" %.0f) "
        CPU[$kind]+="$(div "$(calc '(b - a) * 1e6' a="$cpu0" b="$cpu1")" "$done") "
    done
done
stop_pid "$SERVE_PID"

# The same server without the zone, for its memory.
start_responder "$VOLLEY_BIN"
rss_bare="$(rss_kib "$SERVE_PID")"
stop_pid "$SERVE_PID"

# Each round's ratio to the synthesised names of the same round (min-max over the rounds), and
# the synthesised names' own round-to-round ratio (their noise): a kind answers at the same rate
# when its rounds lie within that noise.
# per_round KIND ARRAY: ARRAY is QPS or CPU.
per_round() { local -n a="$2"; paste -d' ' <(echo "${a[$1]}" | tr ' ' '\n' | grep -v '^$') <(echo "${a[synth]}" | tr ' ' '\n' | grep -v '^$') \
    | awk 'NR == 1 { lo = hi = $1 / $2 } { r = $1 / $2; if (r < lo) lo = r; if (r > hi) hi = r } END { printf "%.2f-%.2f", lo, hi }'; }
synth_noise() { echo "${QPS[synth]}" | tr ' ' '\n' | grep -v '^$' \
    | awk 'NR > 1 { r = $1 / p; if (n == 0 || r < lo) lo = r; if (n == 0 || r > hi) hi = r; n++ } { p = $1 } END { if (n) printf "%.2f-%.2f", lo, hi; else print "n/a" }'; }
declare -A ROUNDS_OF CPU_ROUNDS_OF
for kind in $KINDS; do
    ROUNDS_OF[$kind]="$(per_round "$kind" QPS)"
    CPU_ROUNDS_OF[$kind]="$(per_round "$kind" CPU)"
done
NOISE="$(synth_noise)"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
for kind in $KINDS; do
    QPS[$kind]="$(echo "${QPS[$kind]}" | median)"
    CPU[$kind]="$(echo "${CPU[$kind]}" | median)"
done
{
    echo "### A zone of $RECORDS records"
    echo
    echo "\`volley serve -T 1 --zone\` on core $SERVER_CORE, a $zone_mib MiB zone file ($zone_line)." \
        "Load: $load_own s by the responder's clock (read, check, compile), $load_wall s from the" \
        "start of the process to its listening lines. Memory: RSS $((rss_zone / 1024)) MiB with the" \
        "zone, $((rss_bare / 1024)) MiB without. Rate: $LOAD_LINE on core" \
        "$CLIENT_CORE, $QUERIES names per kind in a random order, $DURATION s per run, median of" \
        "$ROUNDS rounds. $(machine_line)."
    echo
    echo "| names asked | answer | answered qps | server CPU µs per answer | qps / synthesised | each round / its synthesised (min-max) | server CPU per answer, each round / its synthesised (min-max) |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    echo "| synthesised (h*N*.synth.test A, outside the zone) | A 192.0.2.1 | ${QPS[synth]} | ${CPU[synth]} | 1.00 | round to round: $NOISE | 1.00 |"
    echo "| in the zone (h*N*.zone.test A) | its A record | ${QPS[zone]} | ${CPU[zone]} | $(div "${QPS[zone]}" "${QPS[synth]}") | ${ROUNDS_OF[zone]} | ${CPU_ROUNDS_OF[zone]} |"
    echo "| the zone's wildcard (x*N*.zone.test AAAA) | NODATA, SOA | ${QPS[wild]} | ${CPU[wild]} | $(div "${QPS[wild]}" "${QPS[synth]}") | ${ROUNDS_OF[wild]} | ${CPU_ROUNDS_OF[wild]} |"
    echo "| not in the zone (a.h*N*.zone.test A) | NXDOMAIN, SOA | ${QPS[nx]} | ${CPU[nx]} | $(div "${QPS[nx]}" "${QPS[synth]}") | ${ROUNDS_OF[nx]} | ${CPU_ROUNDS_OF[nx]} |"
} | write_fragment "zone_1m"
