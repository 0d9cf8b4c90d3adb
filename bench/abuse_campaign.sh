#!/usr/bin/env bash
# The responder under abuse (issue 16, part 3), beside unbound 1.17 and dnsdist 1.7: each
# attack of the abuse harness (crates/cli/examples/abuse.rs) runs against each server for
# DURATION seconds while a well-behaved `volley run` asks at GOOD_QPS over the attacked
# transport (from the attack's second second to its end). For each line and server: the
# server's peak resident memory (VmRSS sampled every 200 ms, and before the attack), the good
# client's p99 and the share of its queries answered, and whether the server survived.
# Prints a Markdown table (the one in docs/reliability.md).
#
# Each server runs with one thread pinned to SERVER_CORE, with its defaults except where a
# server needs a setting to serve the transport (configs below); a fresh server per line.
# unbound serves DoH over HTTP/2 only, neither peer serves DoQ or DoH/3: those cells are
# "n/a". The volley binary: $VOLLEY, else `cargo build --release`.
#
# Sizes: CONNS (slowloris and stall connections, default 2000), IDLE_QUIC_CONNS (idle DoQ
# connections, each from a socket of its own, default 2000), IDLE_CONNS (default 50000;
# the campaign raises its open-files limit to 1.5 x IDLE_CONNS + 4096 where it may (root: up to
# fs.nr_open), else several harness processes run side by side; they connect from SOURCES
# loopback addresses, 127.0.0.1..N, so that no source address runs out of ports), H2_CONNS (8), QUIC_CONNS (16), UDP_SOCKS (4),
# REPLAY_CONNS (0-RTT replayers at once, each sending the recorded first flight again every
# second, default 200), DURATION (20 s), GOOD_QPS (100), LINES (all: none slowloris-tcp
# slowloris-dot slowloris-doh1 idle-tcp idle-doq stall-tcp stall-dot rapid-reset continuation
# big-headers doq-streams doh3-streams long-url udp-garbage dot-0rtt doq-0rtt doh3-0rtt),
# SERVERS ("volley unbound dnsdist"), VOLLEY_SERVE_ARGS (more options for `volley serve`, e.g.
# "--request-timeout 60s" to see what closing slow connections costs the good client),
# ATTACK_CORE and GOOD_CORE (pin the attack harness and the good client to a core; by default
# neither is pinned, and the scheduler puts both on the core the server leaves, where the good
# client's queries leave through the attacker's core: under the UDP flood that way is in the
# good client's service time, see docs/reliability.md).
#
# The 0-RTT lines start volley with --zero-rtt (it takes early data); the peers keep their
# defaults (neither takes TLS early data: the replayed ClientHello resumes, or not, without it).

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

DURATION="${DURATION:-20}"
GOOD_QPS="${GOOD_QPS:-100}"
CONNS="${CONNS:-2000}"
IDLE_CONNS="${IDLE_CONNS:-50000}"
IDLE_QUIC_CONNS="${IDLE_QUIC_CONNS:-2000}"
SOURCES="${SOURCES:-16}"
H2_CONNS="${H2_CONNS:-8}"
QUIC_CONNS="${QUIC_CONNS:-16}"
UDP_SOCKS="${UDP_SOCKS:-4}"
REPLAY_CONNS="${REPLAY_CONNS:-200}"
attack_pin=()
[ -n "${ATTACK_CORE:-}" ] && attack_pin=(taskset -c "$ATTACK_CORE")
good_pin=()
[ -n "${GOOD_CORE:-}" ] && good_pin=(taskset -c "$GOOD_CORE")
SERVERS="${SERVERS:-volley unbound dnsdist}"
LINES="${LINES:-none slowloris-tcp slowloris-dot slowloris-doh1 idle-tcp idle-doq stall-tcp stall-dot rapid-reset continuation big-headers doq-streams doh3-streams long-url udp-garbage dot-0rtt doq-0rtt doh3-0rtt}"

need taskset jq kdig openssl
check_cores

# Open files: the servers, each harness process and their threads inherit this shell's limit.
# Raise it where we may (root: up to fs.nr_open) so that IDLE_CONNS connections fit in one
# harness process and in one server thread (volley closes connections idle for 1 s once a
# thread holds three quarters of its limit: 1.5 x IDLE_CONNS keeps that threshold above
# them); otherwise the harness runs as several processes of (limit - 1000) connections each,
# and the servers keep what their limit allows.
want_nofile=$((IDLE_CONNS * 3 / 2 + 4096))
nr_open="$(cat /proc/sys/fs/nr_open 2>/dev/null || echo 1048576)"
[ "$want_nofile" -gt "$nr_open" ] && want_nofile="$nr_open"
hard="$(ulimit -Hn)"
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want_nofile" ]; then
    ulimit -Hn "$want_nofile" 2>/dev/null || log "cannot raise the hard open-files limit past $hard (not root)"
fi
hard="$(ulimit -Hn)"
[ "$hard" = unlimited ] && hard="$want_nofile"
soft=$((hard < want_nofile ? hard : want_nofile))
ulimit -Sn "$soft" 2>/dev/null || true
PER_PROC=$(($(ulimit -Sn) - 1000))
log "open files: $(ulimit -Sn) (hard $(ulimit -Hn), fs.nr_open $nr_open): at most $PER_PROC connections per harness process"
VOLLEY_BIN="$(volley_bin_copy)"
ABUSE="${ABUSE:-}"
if [ -z "$ABUSE" ]; then
    (cd "$REPO_DIR" && cargo build --release -p volley --example abuse >&2) || die "cannot build the abuse harness"
    ABUSE="${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/examples/abuse"
fi
cp "$ABUSE" "$WORK/abuse"
ABUSE="$WORK/abuse"
make_cert "$WORK"
CERT="$WORK/cert.pem"
KEY="$WORK/key.pem"

# The peers' ports: below the kernel's ephemeral range and used by no socket at all. lib.sh's
# free_port draws from 20000-60000 and checks listening sockets only, but here the harness's
# tens of thousands of connections take ephemeral ports as their source ports, and a peer
# whose port was one of them failed to start ("Address already in use").
free_port() {
    local low p
    low="$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
    for p in $(shuf -i 10000-$((low - 1)) -n 50); do
        if ! (ss -Htuan 2>/dev/null | awk '{ print $5 }' | grep -q ":$p\$"); then
            echo "$p"
            return
        fi
    done
    die "no free port found"
}

# attack proto conns good-client-transport, per line.
line_spec() {
    case "$1" in
        none) echo "none udp 0 udp" ;;
        slowloris-tcp) echo "slowloris tcp $CONNS tcp" ;;
        slowloris-dot) echo "slowloris dot $CONNS dot" ;;
        slowloris-doh1) echo "slowloris doh1 $CONNS doh2" ;;
        idle-tcp) echo "idle tcp $IDLE_CONNS tcp" ;;
        idle-doq) echo "idle doq $IDLE_QUIC_CONNS doq" ;;
        stall-tcp) echo "stall tcp $CONNS tcp" ;;
        stall-dot) echo "stall dot $CONNS dot" ;;
        rapid-reset) echo "rapid-reset doh2 $H2_CONNS doh2" ;;
        continuation) echo "continuation doh2 $H2_CONNS doh2" ;;
        big-headers) echo "big-headers doh2 $H2_CONNS doh2" ;;
        doq-streams) echo "quic-streams doq $QUIC_CONNS doq" ;;
        doh3-streams) echo "quic-streams doh3 $QUIC_CONNS doh3" ;;
        long-url) echo "long-url doh1 $H2_CONNS doh2" ;;
        udp-garbage) echo "udp-garbage udp $UDP_SOCKS udp" ;;
        dot-0rtt) echo "0rtt-replay dot $REPLAY_CONNS dot" ;;
        doq-0rtt) echo "0rtt-replay doq $REPLAY_CONNS doq" ;;
        doh3-0rtt) echo "0rtt-replay doh3 $REPLAY_CONNS doh3" ;;
        *) die "unknown line $1" ;;
    esac
}

line_title() {
    case "$1" in
        none) echo "no attack (baseline)" ;;
        slowloris-tcp) echo "slowloris, TCP ($CONNS conns, 1 byte/s)" ;;
        slowloris-dot) echo "slowloris, DoT ($CONNS conns, 1 byte/s)" ;;
        slowloris-doh1) echo "slowloris, DoH/1.1 ($CONNS conns, 1 byte/s)" ;;
        idle-tcp) echo "idle connections, TCP ($IDLE_CONNS)" ;;
        idle-doq) echo "idle connections, DoQ ($IDLE_QUIC_CONNS)" ;;
        stall-tcp) echo "length prefix 65,535 never sent, TCP ($CONNS conns)" ;;
        stall-dot) echo "length prefix 65,535 never sent, DoT ($CONNS conns)" ;;
        rapid-reset) echo "HTTP/2 rapid reset ($H2_CONNS conns)" ;;
        continuation) echo "HTTP/2 CONTINUATION flood ($H2_CONNS conns)" ;;
        big-headers) echo "HTTP/2 1 MiB header blocks ($H2_CONNS conns)" ;;
        doq-streams) echo "DoQ stream flood ($QUIC_CONNS conns)" ;;
        doh3-streams) echo "DoH/3 stream flood ($QUIC_CONNS conns)" ;;
        long-url) echo "DoH/1.1 GET, 64 KiB URL ($H2_CONNS conns)" ;;
        udp-garbage) echo "UDP malformed flood ($UDP_SOCKS sockets)" ;;
        dot-0rtt) echo "TLS early data replayed, DoT ($REPLAY_CONNS replayers, 1/s each)" ;;
        doq-0rtt) echo "QUIC 0-RTT replayed, DoQ ($REPLAY_CONNS replayers, 1/s each)" ;;
        doh3-0rtt) echo "QUIC 0-RTT replayed, DoH/3 ($REPLAY_CONNS replayers, 1/s each)" ;;
    esac
}

# Whether a server serves a transport (the attack's and the good client's).
serves() {
    local server="$1" t="$2"
    case "$server:$t" in
        unbound:doh1 | unbound:doq | unbound:doh3 | dnsdist:doq | dnsdist:doh3) return 1 ;;
    esac
    return 0
}

# Each start_* sets SRV_PID and the ports UDP_PORT TCP_PORT DOT_PORT DOH_PORT DOQ_PORT DOH3_PORT.
start_volley() {
    local zero=()
    case "$line" in *-0rtt) zero=(--zero-rtt) ;; esac
    # shellcheck disable=SC2086 # VOLLEY_SERVE_ARGS: words
    start_responder "$VOLLEY_BIN" "${zero[@]}" ${VOLLEY_SERVE_ARGS:-} --dot-port 0 --doh-port 0 --doq-port 0 --doh3-port 0 --cert "$CERT" --key "$KEY"
    SRV_PID="$SERVE_PID"
    UDP_PORT="$SERVE_UDP"
    TCP_PORT="$SERVE_TCP"
    DOT_PORT="$(serve_port dot)"
    DOH_PORT="$(serve_port doh)"
    DOQ_PORT="$(serve_port doq)"
    DOH3_PORT="$(serve_port doh3)"
}

four_ports() {
    UDP_PORT="$(free_port)"
    TCP_PORT="$UDP_PORT"
    DOT_PORT="$(free_port)"
    DOH_PORT="$(free_port)"
    while [ "$DOH_PORT" = "$DOT_PORT" ] || [ "$DOH_PORT" = "$UDP_PORT" ] || [ "$DOT_PORT" = "$UDP_PORT" ]; do
        DOT_PORT="$(free_port)"
        DOH_PORT="$(free_port)"
    done
}

start_dnsdist() {
    need dnsdist
    four_ports
    cat >"$WORK/dnsdist.conf" <<CONF
setLocal('127.0.0.1:$UDP_PORT')
setSecurityPollSuffix('')
addTLSLocal('127.0.0.1:$DOT_PORT', '$CERT', '$KEY', {provider='openssl'})
addDOHLocal('127.0.0.1:$DOH_PORT', '$CERT', '$KEY', '/dns-query')
addAction(AllRule(), SpoofAction({'192.0.2.1', '2001:db8::1'}))
CONF
    start_dnsdist_conf "$WORK/dnsdist.conf"
}

start_unbound() {
    need unbound
    four_ports
    # incoming-num-tcp: unbound's default (10 per thread) turns away every TCP client beyond
    # ten; 1000 as in bench/responder_encrypted.sh.
    cat >"$WORK/unbound.conf" <<CONF
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
  interface: 127.0.0.1@$UDP_PORT
  interface: 127.0.0.1@$DOT_PORT
  interface: 127.0.0.1@$DOH_PORT
  tls-port: $DOT_PORT
  https-port: $DOH_PORT
  http-endpoint: "/dns-query"
  tls-service-key: "$KEY"
  tls-service-pem: "$CERT"
  access-control: 127.0.0.0/8 allow
  incoming-num-tcp: 1000
  module-config: "iterator"
  local-zone: "example.test." static
  local-data: "www.example.test. 300 IN A 192.0.2.1"
CONF
    taskset -c "$SERVER_CORE" unbound -d -c "$WORK/unbound.conf" >"$WORK/unbound.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
}

port_of() {
    case "$1" in
        udp) echo "$UDP_PORT" ;; tcp) echo "$TCP_PORT" ;; dot) echo "$DOT_PORT" ;;
        doh1 | doh2) echo "$DOH_PORT" ;; doq) echo "$DOQ_PORT" ;; doh3) echo "$DOH3_PORT" ;;
    esac
}

url_of() {
    case "$1" in
        udp) echo "udp://127.0.0.1:$UDP_PORT" ;;
        tcp) echo "tcp://127.0.0.1:$TCP_PORT" ;;
        dot) echo "tls://127.0.0.1:$DOT_PORT" ;;
        doh2) echo "https://127.0.0.1:$DOH_PORT/dns-query" ;;
        doq) echo "quic://127.0.0.1:$DOQ_PORT" ;;
        doh3) echo "h3://127.0.0.1:$DOH3_PORT/dns-query" ;;
    esac
}

# The server's VmRSS (KiB) into RSS, forking nothing: the loop below samples it five times a
# second beside the good client, and a fork and exec of awk and sleep each time put about
# 1.3 ms into the good client's p99 under the UDP flood (docs/reliability.md, "The UDP flood
# and error answers"). `nap` sleeps by waiting on a pipe no one writes to.
rss_now() {
    local k v _
    RSS=0
    while read -r k v _; do
        if [ "$k" = VmRSS: ]; then
            RSS="$v"
            return
        fi
    done 2>/dev/null <"/proc/$1/status"
}
exec {NAP_FD}<> <(:)
nap() { read -r -t "$1" -u "$NAP_FD" _ || true; }

declare -A CELL
for line in $LINES; do
    read -r attack proto conns good <<<"$(line_spec "$line")"
    for server in $SERVERS; do
        if ! serves "$server" "$proto" || ! serves "$server" "$good"; then
            CELL[$line:$server]="n/a | n/a | n/a"
            continue
        fi
        "start_$server"
        gurl="$(url_of "$good")"
        extra=(--ca "$CERT")
        [ "$good" = udp ] || [ "$good" = tcp ] && extra=()
        WAIT_LOG="$WORK/$server.log"
        [ "$server" = volley ] && WAIT_LOG="$WORK/serve.err"
        wait_url_answers "$VOLLEY_BIN" "$gurl" "${extra[@]}"
        sleep 1
        rss_now "$SRV_PID"
        base="$RSS"
        peak="$base"
        log "$line against $server (pid $SRV_PID): $attack $proto x$conns for ${DURATION}s, good client $gurl"
        apids=()
        if [ "$attack" != none ]; then
            # One harness process holds at most its open-files limit less some.
            left="$conns"
            while [ "$left" -gt 0 ]; do
                n=$((left > PER_PROC ? PER_PROC : left))
                "${attack_pin[@]}" "$ABUSE" "$attack" "$proto" "127.0.0.1:$(port_of "$proto")" --conns "$n" --secs "$DURATION" \
                    --interval-ms 1000 --sources "$SOURCES" >>"$WORK/$line.$server.attack" 2>&1 &
                apids+=($!)
                PIDS+=($!)
                left=$((left - n))
            done
        fi
        sleep 1
        gdur=$((DURATION - 2))
        "${good_pin[@]}" "$VOLLEY_BIN" run "$gurl" "${extra[@]}" -Q "$GOOD_QPS" -l "${gdur}s" -t 2s -T 1 --name www.example.test \
            --progress never -q -o "$WORK/$line.$server.json" >"$WORK/$line.$server.good" 2>&1 &
        gpid=$!
        PIDS+=("$gpid")
        end=$((SECONDS + DURATION + 10))
        alive=yes
        while kill -0 "$gpid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do
            rss_now "$SRV_PID"
            [ "$RSS" -gt "$peak" ] && peak="$RSS"
            nap 0.2
        done
        for p in "${apids[@]}"; do
            while kill -0 "$p" 2>/dev/null; do
                rss_now "$SRV_PID"
                [ "$RSS" -gt "$peak" ] && peak="$RSS"
                nap 0.2
            done
            wait "$p" 2>/dev/null || true
        done
        wait "$gpid" 2>/dev/null || true
        kill -0 "$SRV_PID" 2>/dev/null || alive=no
        if [ -s "$WORK/$line.$server.json" ]; then
            p99="$(jq -r '.latency.p99_ns // 0 | . / 1e6 | (. * 100 | round) / 100' "$WORK/$line.$server.json")"
            share="$(jq -r '.totals | if .issued > 0 then (.answered * 1000 / .issued | round) / 10 else 0 end' "$WORK/$line.$server.json")"
        else
            p99="-"
            share="0 ($(head -c 80 "$WORK/$line.$server.good" | tr '\n|' '  '))"
        fi
        [ "$alive" = yes ] || share="$share (server died)"
        CELL[$line:$server]="$((base / 1024)) → $((peak / 1024)) | $p99 | $share"
        log "  $server: RSS ${base} -> ${peak} KiB, good p99 ${p99} ms, answered ${share} %; attack: $(cat "$WORK/$line.$server.attack" 2>/dev/null | tr '\n' ' ')"
        stop_pid "$SRV_PID"
        if [ "$server" = volley ]; then
            log "  stats: $(tail -1 "$WORK/serve.err")"
        fi
        sleep 1
    done
done

{
    echo "| attack | $(for s in $SERVERS; do printf '%s RSS MiB (before → peak) | %s good p99 ms | %s answered %% | ' "$s" "$s" "$s"; done | sed 's/ | $//') |"
    printf '| --- '
    for s in $SERVERS; do printf '| ---: | ---: | ---: '; done
    echo '|'
    for line in $LINES; do
        printf '| %s ' "$(line_title "$line")"
        for s in $SERVERS; do printf '| %s ' "${CELL[$line:$s]}"; done
        echo '|'
    done
}
