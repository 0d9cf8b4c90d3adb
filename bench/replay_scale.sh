#!/usr/bin/env bash
# Replaying captured clients at scale from one process: a capture of CAPTURED clients (written
# here as a pcap: each client a source address sending Poisson-timed queries for SPAN seconds),
# turned into a clients file by `volley pcap`, replayed by `volley run --replay --clients N`,
# which repeats the captured clients with time offsets to reach N (DNS Shotgun's method), so
# the load is N x RATE qps. Reports generator CPU per query, memory per client, send lateness
# (issue 5's goal: p99 under 1 ms at 100k qps) and, over DoT, the connections held at once.
#
#   bash bench/replay_scale.sh                                   # 1M UDP clients, 100k qps
#   TRANSPORT=dot CLIENTS=100000 RATE=0.01 bash bench/replay_scale.sh   # 100k DoT forwarders
#
# Env: TRANSPORT (udp: stub clients; dot: forwarder clients, one connection each, closed after
# 10 s idle), CLIENTS (1000000), RATE (queries per second per client, 0.1), CAPTURED (2000),
# SPAN (capture length, 600 s: long enough that nearly every client of the capture sends at RATE), DURATION (replayed seconds, 15), CLIENT_CORE, SERVER_CORE,
# VOLLEY, VOLLEY_NO_BUILD, OUT_DIR.
# CONNECTIONS=N: the UDP clients share N sockets (default: one socket per client, as many as the
# open-files limit allows).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRANSPORT="${TRANSPORT:-udp}"
CLIENTS="${CLIENTS:-1000000}"
RATE="${RATE:-0.1}"
CAPTURED="${CAPTURED:-2000}"
SPAN="${SPAN:-600}"
DURATION="${DURATION:-15}"
need /usr/bin/time jq taskset python3
check_cores
volley="$(volley_bin_copy)"

# A capture: Ethernet/IPv4/UDP DNS queries from 10.0.x.y to 192.0.2.53, Poisson times.
python3 - "$WORK/capture.pcap" "$CAPTURED" "$RATE" "$SPAN" <<'PY'
import random, struct, sys
out, n, rate, span = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
random.seed(7)
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
def name(i):
    return b"".join(bytes([len(l)]) + l for l in [b"host%d" % (i % 500), b"example", b"test"]) + b"\0"
pkts = []
for c in range(n):
    t = random.expovariate(rate)
    src = bytes([10, 0, (c >> 8) & 255, c & 255])
    q = 0
    while t < span:
        dns = struct.pack("!HHHHHH", random.getrandbits(16), 0x0100, 1, 0, 0, 0) + name(c * 7 + q) + struct.pack("!HH", 1, 1)
        udp = struct.pack("!HHHH", 40000 + c % 20000, 53, 8 + len(dns), 0) + dns
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, src, bytes([192, 0, 2, 53]))
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        eth = b"\x02\0\0\0\0\x01" + b"\x02\0\0\0\0\x02" + b"\x08\x00"
        pkts.append((t, eth + ip + udp))
        t += random.expovariate(rate)
        q += 1
pkts.sort(key=lambda p: p[0])
with open(out, "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for t, p in pkts:
        sec = 1_700_000_000 + int(t)
        f.write(struct.pack("<IIII", sec, int((t % 1) * 1e6), len(p), len(p)) + p)
print(len(pkts), file=sys.stderr)
PY
"$volley" pcap "$WORK/capture.pcap" -o "$WORK/clients.vc" >"$WORK/pcap.out" 2>&1 || die "volley pcap failed: $(cat "$WORK/pcap.out")"
log "$(grep -m1 -i "clients" "$WORK/pcap.out" || true)"

start_clients_target "$volley" "$TRANSPORT"
log "volley run $url --replay clients.vc --clients $CLIENTS (${extra[*]}) for ${DURATION}s"
/usr/bin/time -f "%M %U %S" -o "$WORK/usage" taskset -c "$CLIENT_CORE" "$volley" run "$url" "${extra[@]}" \
    --replay "$WORK/clients.vc" --clients "$CLIENTS" -l "${DURATION}s" -T 1 ${CONNECTIONS:+--connections "$CONNECTIONS"} -q --progress never \
    -o "$WORK/r.json" >"$WORK/run.out" 2>&1 || die "volley run failed: $(tail -5 "$WORK/run.out")"
stop_pid "$SERVE_PID"
read -r rss user sys <"$WORK/usage"
cpu="$(calc 'u + s' u="$user" s="$sys")"
qps="$(calc 'c * r' c="$CLIENTS" r="$RATE")"
{
    echo "### Replay: $CLIENTS ${TRANSPORT^^} clients from a capture of $CAPTURED"
    echo
    echo "A ${SPAN} s capture of $CAPTURED clients (Poisson queries, $RATE qps each) through \`volley pcap\`," \
        "replayed for ${DURATION} s as $CLIENTS clients (the captured ones repeated with time offsets):" \
        "about $qps qps. One generator thread on core $CLIENT_CORE, profile ${extra[1]};" \
        "\`volley serve -T 1\` on core $SERVER_CORE. $(machine_line)."
    echo
    echo "| clients | sent | answered | RSS | bytes per client | CPU µs per query | lateness p50 | lateness p99 | p99.9 | connections open at once | opened |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    jq -r --arg rss "$rss" --arg n "$CLIENTS" --arg cpu "$cpu" '
        "| \($n) | \(.totals.sent) | \(.totals.answered) | \($rss) KiB | \(($rss|tonumber)*1024/($n|tonumber)|floor)" +
        " | \((($cpu|tonumber)*1e6/(.totals.sent|if . == 0 then 1 else . end))*10|floor/10)" +
        " | \(.send_lateness.p50_ns/1000|floor) µs | \(.send_lateness.p99_ns/1000|floor) µs | \(.send_lateness.p999_ns/1000|floor) µs" +
        " | \([.series[].connections.active] | max // 0) | \(.connections.opened // 0) |"' "$WORK/r.json"
} | write_fragment "replay_scale_$TRANSPORT"
