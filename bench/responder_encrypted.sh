#!/usr/bin/env bash
# The responder (`volley serve -T 1`) against dnsdist 1.7 (SpoofAction) and unbound 1.17
# (local-data) over DoT and DoH/2: answered QPS per server core. Issue 3's goal: volley serve
# ahead of both. Each server runs alone, pinned to $SERVER_CORE (one thread where it has the
# knob), with the same certificate (P-256); the same closed-loop generator (`volley run -c
# INFLIGHT --connections CONNECTIONS -T 1`, pinned to $CLIENT_CORE) drives each for DURATION s.
#
# Reported: answered qps, the server's CPU share of its core (from /proc/PID/stat), answered qps
# per server core (qps / CPU share), the generator's CPU share (near 100 %: the generator, not
# the server, set the pace), and the ratios volley/dnsdist and volley/unbound of qps per core.
#
# CONN_QUERIES=N: each connection takes N queries and closes (`volley run --conn-queries N`),
# so that CONN_QUERIES=1 measures handshakes: answered qps per server core is then TLS
# handshakes per server core (default: connections kept for the whole run).
#
# Env: DURATION (10 s per server and transport), INFLIGHT (200), CONNECTIONS (4), TRANSPORTS
# ("dot doh"), SERVERS ("volley dnsdist unbound"), DOH_METHOD (post), CLIENT_CORE (0),
# SERVER_CORE (1), VOLLEY, VOLLEY_NO_BUILD, OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION="${DURATION:-10}"
INFLIGHT="${INFLIGHT:-200}"
CONNECTIONS="${CONNECTIONS:-4}"
TRANSPORTS="${TRANSPORTS:-dot doh}"
SERVERS="${SERVERS:-volley dnsdist unbound}"
DOH_METHOD="${DOH_METHOD:-post}"

need taskset jq /usr/bin/time
check_cores
VOLLEY_BIN="$(volley_bin_copy)"
make_cert "$WORK"
CERT="$WORK/cert.pem"
KEY="$WORK/key.pem"

# Names every server answers with NOERROR and data.
QUERIES="$WORK/queries.txt"
printf 'www.example.test A\nwww.example.test AAAA\n' >"$QUERIES"

# Each start_* sets SRV_PID, DOT_PORT and DOH_PORT.
start_volley() {
    start_responder "$VOLLEY_BIN" --dot-port 0 --doh-port 0 --cert "$CERT" --key "$KEY"
    SRV_PID="$SERVE_PID"
    DOT_PORT="$(serve_port dot)"
    DOH_PORT="$(serve_port doh)"
}

start_dnsdist() {
    need dnsdist
    local udp
    udp="$(free_port)"
    DOT_PORT="$(free_port)"
    DOH_PORT="$(free_port)"
    while [ "$DOH_PORT" = "$DOT_PORT" ] || [ "$DOH_PORT" = "$udp" ] || [ "$DOT_PORT" = "$udp" ]; do
        DOT_PORT="$(free_port)"
        DOH_PORT="$(free_port)"
    done
    local conf="$WORK/dnsdist.conf"
    cat >"$conf" <<CONF
setLocal('127.0.0.1:$udp')
setSecurityPollSuffix('')
setMaxTCPConnectionsPerClient(100000)
setMaxTCPQueriesPerConnection(0)
addTLSLocal('127.0.0.1:$DOT_PORT', '$CERT', '$KEY', {provider='openssl'})
addDOHLocal('127.0.0.1:$DOH_PORT', '$CERT', '$KEY', '/dns-query')
addAction(AllRule(), SpoofAction({'192.0.2.1', '2001:db8::1'}))
CONF
    start_dnsdist_conf "$conf"
}

start_unbound() {
    need unbound
    local udp
    udp="$(free_port)"
    DOT_PORT="$(free_port)"
    DOH_PORT="$(free_port)"
    while [ "$DOH_PORT" = "$DOT_PORT" ] || [ "$DOH_PORT" = "$udp" ] || [ "$DOT_PORT" = "$udp" ]; do
        DOT_PORT="$(free_port)"
        DOH_PORT="$(free_port)"
    done
    local conf="$WORK/unbound.conf"
    # so-reuseport: no, so that a port already taken (unbound elsewhere) fails instead of sharing.
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
  so-reuseport: no
  do-ip6: no
  interface: 127.0.0.1@$udp
  interface: 127.0.0.1@$DOT_PORT
  interface: 127.0.0.1@$DOH_PORT
  tls-port: $DOT_PORT
  https-port: $DOH_PORT
  http-endpoint: "/dns-query"
  tls-service-key: "$KEY"
  tls-service-pem: "$CERT"
  access-control: 127.0.0.0/8 allow
  incoming-num-tcp: 1000
  num-queries-per-thread: 4096
  http-max-streams: 1000
  module-config: "iterator"
  local-zone: "example.test." static
  local-data: "www.example.test. 300 IN A 192.0.2.1"
  local-data: "www.example.test. 300 IN AAAA 2001:db8::1"
CONF
    taskset -c "$SERVER_CORE" unbound -d -c "$conf" >"$WORK/unbound.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
}

declare -A QPS SRVPCT PERCORE GENPCT
for server in $SERVERS; do
    "start_$server"
    for t in $TRANSPORTS; do
        case "$t" in
            dot) url="tls://127.0.0.1:$DOT_PORT"; extra=() ;;
            doh) url="https://127.0.0.1:$DOH_PORT/dns-query"; extra=(--http 2 --doh-method "$DOH_METHOD") ;;
            *) die "unknown transport $t (dot or doh)" ;;
        esac
        kill -0 "$SRV_PID" 2>/dev/null || die "$server exited: $(tail -5 "$WORK/$server.log" 2>/dev/null)"
        WAIT_LOG="$WORK/$server.log"
        [ "$server" = volley ] && WAIT_LOG="$WORK/serve.err"
        wait_url_answers "$VOLLEY_BIN" "$url" --ca "$CERT" "${extra[@]}"
        log "$server ($t, pid $SRV_PID, core $SERVER_CORE): volley run -c $INFLIGHT --connections $CONNECTIONS for ${DURATION}s"
        cpu0="$(proc_cpu_s "$SRV_PID")"
        if [ -n "${CONN_QUERIES:-}" ]; then extra+=(--conn-queries "$CONN_QUERIES"); fi
        timed "$WORK/$server.$t.gen" taskset -c "$CLIENT_CORE" "$VOLLEY_BIN" run "$url" --ca "$CERT" "${extra[@]}" \
            -d "$QUERIES" -c "$INFLIGHT" -l "${DURATION}s" -T 1 --connections "$CONNECTIONS" --progress never -q \
            -o "$WORK/$server.$t.json" >"$WORK/$server.$t.out" 2>&1 \
            || die "volley run against $server failed: $(tail -5 "$WORK/$server.$t.out")"
        cpu1="$(proc_cpu_s "$SRV_PID")"
        read -r done secs < <(volley_stats "$WORK/$server.$t.json")
        noerror="$(jq -r '.totals.rcodes.NOERROR // 0' "$WORK/$server.$t.json")"
        [ "$noerror" = "$done" ] || log "warning: $server answered $done over $t, of which only $noerror NOERROR"
        failed="$(jq -r '.totals.failed + .totals.timed_out' "$WORK/$server.$t.json")"
        [ "$failed" = "0" ] || log "warning: $server over $t: $failed queries failed or timed out: $(jq -c '.totals.errors' "$WORK/$server.$t.json")"
        share="$(calc '(b - a) / d' a="$cpu0" b="$cpu1" d="$secs")"
        QPS[$server.$t]="$(div "$done" "$secs" %.0f)"
        SRVPCT[$server.$t]="$(calc 's * 100' s="$share" | xargs printf %.0f)"
        PERCORE[$server.$t]="$(div "${QPS[$server.$t]}" "$share" %.0f)"
        GENPCT[$server.$t]="$(div "$(calc 'c * 100' c="$(cat "$WORK/$server.$t.gen")")" "$secs" %.0f)"
    done
    stop_pid "$SRV_PID"
done

ratio() { # volley's qps per core over $1's, for transport $2
    if [ -n "${PERCORE[volley.$2]:-}" ] && [ -n "${PERCORE[$1.$2]:-}" ]; then
        div "${PERCORE[volley.$2]}" "${PERCORE[$1.$2]}"
    else
        echo "n/a"
    fi
}

{
    echo "### The responder against dnsdist and unbound over DoT and DoH/2"
    echo
    echo "Each server alone on core $SERVER_CORE (one thread where configurable), the same P-256" \
        "certificate; \`volley run -c $INFLIGHT --connections $CONNECTIONS${CONN_QUERIES:+ --conn-queries $CONN_QUERIES} -T 1\` on core $CLIENT_CORE for" \
        "$DURATION s per server and transport; DoH/2 with ${DOH_METHOD^^}. dnsdist answers with SpoofAction," \
        "unbound from local-data. qps per core = answered qps / the server's CPU share. Goal (issue 3):" \
        "volley serve ahead of both. $(machine_line)."
    echo
    echo "| transport | server | answered qps | server CPU % | qps per server core | generator CPU % |"
    echo "| --- | --- | ---: | ---: | ---: | ---: |"
    for t in $TRANSPORTS; do
        for server in $SERVERS; do
            echo "| $t | $server | ${QPS[$server.$t]} | ${SRVPCT[$server.$t]} | ${PERCORE[$server.$t]} | ${GENPCT[$server.$t]} |"
        done
    done
    echo
    echo "| transport | volley/dnsdist (qps per core) | volley/unbound (qps per core) |"
    echo "| --- | ---: | ---: |"
    for t in $TRANSPORTS; do
        echo "| $t | **$(ratio dnsdist "$t")** | **$(ratio unbound "$t")** |"
    done
} | write_fragment responder_encrypted
