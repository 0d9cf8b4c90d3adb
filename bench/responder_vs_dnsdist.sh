#!/usr/bin/env bash
# The responder (`volley serve -T 1`) against fast real servers answering from memory: dnsdist
# 1.7 with SpoofAction, unbound with local-data, and knot-resolver with a policy answer. Each
# runs alone, pinned to $SERVER_CORE with one thread; the same closed-loop generator
# (`volley run -c N -T 1`, pinned to $CLIENT_CORE) drives each for DURATION seconds.
#
# Env: DURATION (10 s per server), INFLIGHT (200), TRANSPORTS ("udp"; "udp tcp" for both),
# SERVERS ("volley dnsdist unbound kresd"), CONNECTIONS (1), CLIENT_CORE (0), SERVER_CORE (1),
# VOLLEY (a prebuilt binary), OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
INFLIGHT="${INFLIGHT:-200}"
TRANSPORTS="${TRANSPORTS:-udp}"
SERVERS="${SERVERS:-volley dnsdist unbound kresd}"
CONNECTIONS="${CONNECTIONS:-1}"

need kdig taskset jq
check_cores
VOLLEY_BIN="$(volley_bin)"

# Each start_* sets SRV_PID and SRV_PORT (UDP and TCP on the same port).
start_volley() {
    start_responder "$VOLLEY_BIN"
    SRV_PID="$SERVE_PID"
    SRV_PORT="$SERVE_UDP"
    SRV_PORT_TCP="$SERVE_TCP"
}

start_dnsdist() {
    need dnsdist
    SRV_PORT="$(free_port)"
    SRV_PORT_TCP="$SRV_PORT"
    local conf="$WORK/dnsdist.conf"
    cat >"$conf" <<CONF
setLocal('127.0.0.1:$SRV_PORT')
setSecurityPollSuffix('')
addAction(AllRule(), SpoofAction({'192.0.2.1', '2001:db8::1'}))
CONF
    start_dnsdist_conf "$conf"
}

start_unbound() {
    need unbound
    SRV_PORT="$(free_port)"
    SRV_PORT_TCP="$SRV_PORT"
    local conf="$WORK/unbound.conf"
    cat >"$conf" <<CONF
server:
  username: ""
  chroot: ""
  directory: "$WORK"
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 0
  num-threads: 1
  do-ip6: no
  interface: 127.0.0.1@$SRV_PORT
  access-control: 127.0.0.0/8 allow
  incoming-num-tcp: 1000
  num-queries-per-thread: 4096
  module-config: "iterator"
  local-zone: "example.test." static
  local-data: "www.example.test. 300 IN A 192.0.2.1"
  local-data: "www.example.test. 300 IN AAAA 2001:db8::1"
  local-data: 'www.example.test. 300 IN TXT "volley"'
CONF
    taskset -c "$SERVER_CORE" unbound -d -c "$conf" >"$WORK/unbound.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
}

start_kresd() {
    need kresd
    SRV_PORT="$(free_port)"
    SRV_PORT_TCP="$SRV_PORT"
    mkdir -p "$WORK/kresd"
    local conf="$WORK/kresd.conf"
    cat >"$conf" <<CONF
net.listen('127.0.0.1', $SRV_PORT, {kind='dns'})
cache.size = 10 * MB
policy.add(policy.suffix(policy.ANSWER({
    [kres.type.A] = {rdata = kres.str2ip('192.0.2.1'), ttl = 300},
    [kres.type.AAAA] = {rdata = kres.str2ip('2001:db8::1'), ttl = 300},
}), {todname('example.test.')}))
CONF
    taskset -c "$SERVER_CORE" kresd -n -c "$conf" "$WORK/kresd" >"$WORK/kresd.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
}

# Only names every server answers with NOERROR (kresd's policy has no TXT).
QUERIES="$WORK/queries.txt"
printf 'www.example.test A\nwww.example.test AAAA\n' >"$QUERIES"

declare -A QPS CPU
for server in $SERVERS; do
    "start_$server"
    for transport in $TRANSPORTS; do
        port="$SRV_PORT"
        [ "$transport" = "tcp" ] && port="$SRV_PORT_TCP"
        wait_answers "$port" www.example.test "$transport"
        log "$server ($transport, pid $SRV_PID, core $SERVER_CORE): volley run -c $INFLIGHT for ${DURATION}s"
        cpu0="$(proc_cpu_s "$SRV_PID")"
        taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "$transport://127.0.0.1:$port" -d "$QUERIES" \
            -c "$INFLIGHT" -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q \
            -o "$WORK/$server.$transport.json" >"$WORK/$server.$transport.out" 2>&1 \
            || die "volley run against $server failed: $(tail -5 "$WORK/$server.$transport.out")"
        cpu1="$(proc_cpu_s "$SRV_PID")"
        read -r done secs < <(volley_stats "$WORK/$server.$transport.json")
        noerror="$(jq -r '.totals.rcodes.NOERROR // 0' "$WORK/$server.$transport.json")"
        [ "$noerror" = "$done" ] || log "warning: $server answered $done, of which only $noerror NOERROR"
        QPS[$server.$transport]="$(div "$done" "$secs" %.0f)"
        CPU[$server.$transport]="$(div "$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print (b - a) * 1e6 }')" "$done")"
    done
    stop_pid "$SRV_PID"
done

{
    echo "### The responder against dnsdist, unbound and knot-resolver"
    echo
    echo "Each server alone on core $SERVER_CORE with one thread; \`volley run -c $INFLIGHT -T 1\` on core" \
        "$CLIENT_CORE for $DURATION s; $CONNECTIONS connection(s). dnsdist answers with SpoofAction," \
        "unbound from local-data, knot-resolver from a policy. $(machine_line)."
    echo
    echo "| server | transport | answered qps | server CPU µs per answer | qps / volley serve |"
    echo "| --- | --- | ---: | ---: | ---: |"
    for transport in $TRANSPORTS; do
        for server in $SERVERS; do
            base="${QPS[volley.$transport]:-}"
            ratio="n/a"
            [ -n "$base" ] && ratio="$(div "${QPS[$server.$transport]}" "$base")"
            echo "| $server | $transport | ${QPS[$server.$transport]} | ${CPU[$server.$transport]} | $ratio |"
        done
    done
} | write_fragment responder_vs_dnsdist
