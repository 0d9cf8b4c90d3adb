# Shared by the bench scripts; source it, do not run it.
#
# Conventions: the server under test runs pinned to $SERVER_CORE (default 1), the generator to
# $CLIENT_CORE (default 0). All traffic stays on 127.0.0.1. Every process started here is
# stopped by its PID on exit. Every wait is bounded.

set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
OUT_DIR="${OUT_DIR:-$BENCH_DIR/out}"
SERVER_CORE="${SERVER_CORE:-1}"
CLIENT_CORE="${CLIENT_CORE:-0}"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/volley-bench.XXXXXX")"
PIDS=()
# Set by veth_namespace: the namespace (and its veth pair) to remove on exit.
NS=""
HOST=""

cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    done
    if [ -n "$NS" ]; then
        ip netns del "$NS" 2>/dev/null || true
        ip link del "$HOST" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() { printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }
log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }

need() {
    local bin
    for bin in "$@"; do
        command -v "$bin" >/dev/null 2>&1 || die "$bin not installed: run scripts/install-deps.sh"
    done
}

check_cores() {
    local n
    n="$(nproc)"
    if [ "$SERVER_CORE" -ge "$n" ] || [ "$CLIENT_CORE" -ge "$n" ]; then
        die "needs cores $CLIENT_CORE and $SERVER_CORE; this machine has $n (set CLIENT_CORE/SERVER_CORE)"
    fi
    [ "$SERVER_CORE" != "$CLIENT_CORE" ] || log "warning: server and client share core $SERVER_CORE"
}

# The release binary: $VOLLEY if set, else built with cargo (unless VOLLEY_NO_BUILD=1).
volley_bin() {
    if [ -n "${VOLLEY:-}" ]; then
        [ -x "$VOLLEY" ] || die "VOLLEY=$VOLLEY is not executable"
        echo "$VOLLEY"
        return
    fi
    if [ "${VOLLEY_NO_BUILD:-0}" != "1" ]; then
        (cd "$REPO_DIR" && cargo build --release -p volley >&2) || die "cargo build --release failed"
    fi
    local bin="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/volley"
    [ -x "$bin" ] || die "no $bin: run cargo build --release -p volley"
    echo "$bin"
}

# dnsperf binds its sockets to a fresh ephemeral port, which a port in TIME_WAIT (left by
# every connection of the runs before: the client closes first) cannot be: wait until most
# have expired (60 s at most) so that it is not starved of ports.
wait_time_wait() {
    local i n
    for i in $(seq 1 75); do
        n="$(ss -Htan state time-wait | wc -l)"
        [ "$n" -lt 2000 ] && return 0
        sleep 1
    done
    log "warning: $n sockets still in TIME_WAIT"
}

# Polls (bounded) until a DNS server answers NAME over UDP (and TCP if $3 = tcp), on
# $SERVE_IP (127.0.0.1 unless veth_namespace set it).
wait_answers() {
    local port="$1" name="$2" transport="${3:-udp}" i flag ip="${SERVE_IP:-127.0.0.1}"
    flag="+notcp"
    [ "$transport" = "tcp" ] && flag="+tcp"
    for i in $(seq 1 100); do
        if kdig @"$ip" -p "$port" "$flag" +retry=0 +time=1 "$name" A 2>/dev/null | grep -q "status: NOERROR"; then
            return 0
        fi
        sleep 0.2
    done
    die "nothing answers $name on $ip:$port over $transport after 20 s"
}

# A network namespace behind a veth pair (needs root and `ip`), removed on exit: sets NS, HOST
# (the host's end, the interface a generator sends on), NET (a /24 of the process's own),
# SERVE_IP (the namespace's address: start_responder then runs the server there).
veth_namespace() {
    [ "$(id -u)" = 0 ] || die "needs root (a namespace and a veth pair)"
    need ip
    NS="volley-bench-$$"
    HOST="vbn$(($$ % 100000))h"
    local peer="vbn$(($$ % 100000))n"
    NET="10.$((100 + $$ % 100)).250"
    SERVE_IP="$NET.2"
    ip netns add "$NS"
    ip link add "$HOST" type veth peer name "$peer"
    ip link set "$peer" netns "$NS"
    ip addr add "$NET.1/24" dev "$HOST"
    ip link set "$HOST" up
    ip netns exec "$NS" ip addr add "$SERVE_IP/24" dev "$peer"
    ip netns exec "$NS" ip link set "$peer" up
    ip netns exec "$NS" ip link set lo up
}

# Waits (10 s at most) until the `volley serve` writing $WORK/serve.out prints its
# `listening TRANSPORT` line ($1); else the script ends with its standard error.
wait_listening() {
    local i
    for i in $(seq 1 100); do
        grep -q "^listening $1" "$WORK/serve.out" 2>/dev/null && return 0
        sleep 0.1
    done
    die "volley serve did not start: $(cat "$WORK/serve.err")"
}

# Starts `volley serve` pinned to the server core with one thread (in the namespace of
# veth_namespace, listening on its address, when one was made); sets SERVE_PID, SERVE_UDP,
# SERVE_TCP (ports). Extra arguments go to `volley serve`.
start_responder() {
    local bin="$1"
    shift
    local log="$WORK/serve.out" wrap=()
    [ -n "$NS" ] && wrap=(ip netns exec "$NS") && set -- -l "$SERVE_IP" "$@"
    "${wrap[@]}" taskset -c "$SERVER_CORE" "$bin" serve -p 0 -T "${SERVE_THREADS:-1}" "$@" >"$log" 2>"$WORK/serve.err" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    local i
    SERVE_UDP=""
    SERVE_TCP=""
    for i in $(seq 1 200); do
        SERVE_UDP="$(awk '$1 == "listening" && $2 == "udp" { n = split($3, a, ":"); print a[n]; exit }' "$log")"
        SERVE_TCP="$(awk '$1 == "listening" && $2 == "tcp" { n = split($3, a, ":"); print a[n]; exit }' "$log")"
        [ -n "$SERVE_UDP" ] && [ -n "$SERVE_TCP" ] && return 0
        kill -0 "$SERVE_PID" 2>/dev/null || die "volley serve exited: $(cat "$WORK/serve.err")"
        sleep 0.1
    done
    die "volley serve printed no listening lines in 20 s: $(cat "$WORK/serve.err")"
}

# Starts dnsdist with the configuration file $1 on $SERVER_CORE (its log in $WORK/dnsdist.log):
# SRV_PID, stopped by cleanup.
start_dnsdist_conf() {
    taskset -c "$SERVER_CORE" dnsdist --supervised --disable-syslog -C "$1" >"$WORK/dnsdist.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
}

stop_pid() {
    local pid="$1"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# A free port on 127.0.0.1 (bound then released by the kernel's choice).
free_port() {
    local p
    for p in $(shuf -i 20000-60000 -n 50); do
        if ! command -v ss >/dev/null 2>&1; then
            echo "$p"
            return
        fi
        if ! (ss -Hltun 2>/dev/null | awk '{print $5}' | grep -q ":$p\$"); then
            echo "$p"
            return
        fi
    done
    die "no free port found"
}

# CPU seconds (user+sys) a process has used so far, from /proc/PID/stat.
proc_cpu_s() {
    local pid="$1" tck
    tck="$(getconf CLK_TCK)"
    awk -v t="$tck" '{ sub(/.*\) /, ""); print ($12 + $13) / t }' "/proc/$pid/stat"
}

# Runs a command under /usr/bin/time; the user+sys seconds go to the file named by $1.
timed() {
    local out="$1"
    shift
    /usr/bin/time -f '%U %S' -o "$out.time" "$@"
    awk '{ print $1 + $2 }' "$out.time" >"$out"
}

# dnsperf's statistics: prints "completed runtime_s".
# Runs one side of a comparison pinned to $CLIENT_CORE: `measure LABEL COMMAND...`. Writes
# its stdout to $WORK/LABEL.out, stderr to .err, its CPU time (user + sys, s) to .cpu, and the
# CPU the responder ($SERVE_PID) spent meanwhile to .srv; a failure ends the script.
measure() {
    local label="$1" s0 s1
    shift
    s0="$(proc_cpu_s "$SERVE_PID")"
    timed "$WORK/$label.cpu" taskset -c "$CLIENT_CORE" "$@" >"$WORK/$label.out" 2>"$WORK/$label.err" \
        || die "$label failed: $(tail -5 "$WORK/$label.err" "$WORK/$label.out")"
    s1="$(proc_cpu_s "$SERVE_PID")"
    calc 'b - a' a="$s0" b="$s1" >"$WORK/$label.srv"
}

dnsperf_stats() {
    awk '/Queries completed:/ { c = $3 } /Run time \(s\):/ { r = $4 } END { print c + 0, r + 0 }' "$1"
}

# volley's results file: prints "answered duration_s" (duration from the answered qps).
volley_stats() {
    jq -r '[.totals.answered, (if .qps.answered > 0 then .totals.answered / .qps.answered else 0 end)] | @tsv' "$1"
}

div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b == 0) print "n/a"; else printf f "\n", a / b }'; }

# Writes the markdown fragment given on stdin to $OUT_DIR/NAME.md and prints it.
write_fragment() {
    mkdir -p "$OUT_DIR"
    cat >"$OUT_DIR/$1.md"
    echo
    cat "$OUT_DIR/$1.md"
    log "wrote $OUT_DIR/$1.md"
}

# One line describing the machine, for the fragments.
machine_line() {
    local cpu
    cpu="$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "$(nproc) cores ($cpu), $(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

# The queries every bench uses: names the responder (and the peers' configs) answer.
write_queries() {
    local f="$WORK/queries.txt"
    printf 'www.example.test A\nwww.example.test AAAA\nwww.example.test TXT\n' >"$f"
    echo "$f"
}

# volley run versus dnsperf against `volley serve`, over $1 (udp or tcp):
#  1. fixed rate: both at RATE qps for DURATION s; answered qps and client CPU µs per answer;
#  2. closed loop: both as fast as they go with many queries in flight; answered qps.
vs_dnsperf() {
    local transport="$1"
    local rate="${RATE:-20000}" duration="${DURATION:-10}" inflight="${INFLIGHT:-200}"
    local conns="${CONNECTIONS:-1}" window="${BATCH_WINDOW:-250us}"
    need kdig dnsperf taskset jq /usr/bin/time
    check_cores
    local volley
    volley="$(volley_bin)"
    local queries
    queries="$(write_queries)"
    start_responder "$volley"
    local port="$SERVE_UDP"
    [ "$transport" = "tcp" ] && port="$SERVE_TCP"
    wait_answers "$port" www.example.test "$transport"
    log "responder pid $SERVE_PID on core $SERVER_CORE, $transport port $port; generators on core $CLIENT_CORE"

    local mode=(-m "$transport")
    local url="$transport://127.0.0.1:$port"

    # 1. Fixed rate.
    log "fixed rate: dnsperf -Q $rate for ${duration}s"
    timed "$WORK/dp_rate.cpu" taskset -c "$CLIENT_CORE" dnsperf -s 127.0.0.1 -p "$port" "${mode[@]}" \
        -d "$queries" -l "$duration" -Q "$rate" -c "$conns" -q "$inflight" >"$WORK/dp_rate.out" 2>&1 \
        || die "dnsperf failed: $(tail -5 "$WORK/dp_rate.out")"
    log "fixed rate: volley run --rate $rate --batch-window $window for ${duration}s"
    timed "$WORK/v_rate.cpu" taskset -c "$CLIENT_CORE" "$volley" run "$url" -d "$queries" --rate "$rate" \
        --batch-window "$window" -l "${duration}s" -T 1 --connections "$conns" --progress never -q -o "$WORK/v_rate.json" \
        >"$WORK/v_rate.out" 2>&1 || die "volley run failed: $(tail -5 "$WORK/v_rate.out")"

    local dp_done dp_time v_done v_time dp_cpu v_cpu
    read -r dp_done dp_time < <(dnsperf_stats "$WORK/dp_rate.out")
    read -r v_done v_time < <(volley_stats "$WORK/v_rate.json")
    dp_cpu="$(cat "$WORK/dp_rate.cpu")"
    v_cpu="$(cat "$WORK/v_rate.cpu")"
    local dp_qps v_qps dp_us v_us
    dp_qps="$(div "$dp_done" "$dp_time" %.0f)"
    v_qps="$(div "$v_done" "$v_time" %.0f)"
    dp_us="$(div "$(awk -v c="$dp_cpu" 'BEGIN { print c * 1e6 }')" "$dp_done")"
    v_us="$(div "$(awk -v c="$v_cpu" 'BEGIN { print c * 1e6 }')" "$v_done")"

    # 2. Closed loop, as fast as each goes.
    log "closed loop: dnsperf -c $conns -q $inflight for ${duration}s"
    taskset -c "$CLIENT_CORE" dnsperf -s 127.0.0.1 -p "$port" "${mode[@]}" -d "$queries" -l "$duration" \
        -c "$conns" -q "$inflight" >"$WORK/dp_max.out" 2>&1 || die "dnsperf failed: $(tail -5 "$WORK/dp_max.out")"
    log "closed loop: volley run -c $inflight for ${duration}s"
    taskset -c "$CLIENT_CORE" "$volley" run "$url" -d "$queries" -c "$inflight" -l "${duration}s" -T 1 \
        --connections "$conns" --progress never -q -o "$WORK/v_max.json" >"$WORK/v_max.out" 2>&1 \
        || die "volley run failed: $(tail -5 "$WORK/v_max.out")"
    local dpm_done dpm_time vm_done vm_time dpm_qps vm_qps
    read -r dpm_done dpm_time < <(dnsperf_stats "$WORK/dp_max.out")
    read -r vm_done vm_time < <(volley_stats "$WORK/v_max.json")
    dpm_qps="$(div "$dpm_done" "$dpm_time" %.0f)"
    vm_qps="$(div "$vm_done" "$vm_time" %.0f)"

    stop_pid "$SERVE_PID"

    local name="${transport}_vs_dnsperf"
    {
        echo "### volley run vs dnsperf over ${transport^^}"
        echo
        echo "Target: \`volley serve -T 1\` on core $SERVER_CORE; generator on core $CLIENT_CORE;" \
            "${duration} s per side; $conns connection(s)/socket(s). $(machine_line)."
        echo
        echo "| measure | dnsperf | volley | volley/dnsperf |"
        echo "| --- | ---: | ---: | ---: |"
        echo "| fixed rate $rate qps: answered qps | $dp_qps | $v_qps | $(div "$v_qps" "$dp_qps") |"
        echo "| fixed rate $rate qps: client CPU µs per answer (volley --batch-window $window) | $dp_us | $v_us | $(div "$v_us" "$dp_us") |"
        echo "| closed loop, $inflight in flight: answered qps | $dpm_qps | $vm_qps | $(div "$vm_qps" "$dpm_qps") |"
    } | write_fragment "$name"
}

# ---- Encrypted transports (encrypted_vs_dnsperf.sh, quic_vs_dnspyre.sh, responder_encrypted.sh,
# ---- transport_cost.sh)

# The port of a `volley serve` listener of KIND (udp tcp dot doh doh3 doq), from its
# "listening KIND ADDR" lines in $2 (default: start_responder's log); waits up to 10 s.
serve_port() {
    local kind="$1" log="${2:-$WORK/serve.out}" i p
    for i in $(seq 1 100); do
        p="$(awk -v k="$kind" '$1 == "listening" && $2 == k { n = split($3, a, ":"); print a[n]; exit }' "$log" 2>/dev/null)"
        if [ -n "$p" ]; then
            echo "$p"
            return 0
        fi
        sleep 0.1
    done
    die "volley serve printed no 'listening $kind' line in 10 s"
}

# Polls (bounded, ~20 s) until URL answers a query from `volley run` (any transport). Usage:
# wait_url_answers VOLLEY_BIN URL [extra volley run arguments, e.g. --ca FILE]
# On failure the last probe's error and the tail of $WAIT_LOG (a server log, if set) are shown.
wait_url_answers() {
    local bin="$1" url="$2" i
    shift 2
    for i in $(seq 1 40); do
        rm -f "$WORK/probe.json"
        if "$bin" run "$url" "$@" -n 1 -c 1 -T 1 -t 1s --progress never -q -o "$WORK/probe.json" \
            >"$WORK/probe.err" 2>&1 && [ "$(jq -r '.totals.answered' "$WORK/probe.json" 2>/dev/null)" = "1" ]; then
            return 0
        fi
        sleep 0.5
    done
    die "nothing answers at $url after 20 s: $(tail -3 "$WORK/probe.err"; jq -c '.totals.errors' "$WORK/probe.json" 2>/dev/null)${WAIT_LOG:+; $(tail -5 "$WAIT_LOG" 2>/dev/null)}"
}

# A private copy of the volley binary in $WORK, so that a `cargo build` elsewhere in the
# checkout cannot replace it in the middle of a run: VOLLEY_BIN="$(volley_bin_copy)".
volley_bin_copy() {
    local bin
    bin="$(volley_bin)"
    cp "$bin" "$WORK/volley" || die "cannot copy $bin"
    echo "$WORK/volley"
}

# A P-256 certificate for localhost and 127.0.0.1 that every peer and rustls accept (PEERS.md):
# writes DIR/cert.pem and DIR/key.pem.
make_cert() {
    local dir="$1"
    need openssl
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 30 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -addext "basicConstraints=critical,CA:FALSE" -addext extendedKeyUsage=serverAuth \
        >/dev/null 2>&1 || die "openssl could not make a certificate"
}

# dnspyre's --json report: prints "answered duration_s" (answered = any RCODE).
dnspyre_stats() {
    jq -r '[(.totalSuccessResponses + .totalNegativeResponses + .totalErrorResponses), .benchmarkDurationSeconds] | @tsv' "$1"
}

# Arithmetic on decimals: calc 'a * 1e6 / b' a=1 b=2 ... (awk expression with -v bindings).
calc() {
    local expr="$1" args=() kv
    shift
    for kv in "$@"; do args+=(-v "$kv"); done
    awk "${args[@]}" "BEGIN { print $expr }"
}

# For the simulated-clients benches: starts `volley serve` (binary $1) for transport $2 and
# sets `url` (the target) and `extra` (the profile and, over DoT, the CA):
# udp: stub clients; dot: forwarder clients (the responder keeps idle connections a minute).
start_clients_target() {
    local bin="$1" transport="$2"
    case "$transport" in
        udp)
            start_responder "$bin"
            url="udp://127.0.0.1:$SERVE_UDP"
            extra=(--profile stub)
            ;;
        dot)
            start_responder "$bin" --dot-port 0 --ca-out "$WORK/ca.pem" --idle-timeout 1m
            url="tls://127.0.0.1:$(serve_port dot)"
            wait_url_answers "$bin" "$url" --ca "$WORK/ca.pem"
            extra=(--profile forwarder --ca "$WORK/ca.pem")
            ;;
        *) die "TRANSPORT=$transport: udp or dot" ;;
    esac
}
