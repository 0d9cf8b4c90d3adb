#!/usr/bin/env bash
# Memory stays flat: a long open-loop run at a fixed rate must end within 10 % of the
# resident memory it had at minute 1 (histograms and per-second series, no per-query records).
#
#   DURATION=600 RATE=20000 TRANSPORT=udp bench/memory_flat.sh
#
# Prints RSS samples, the ratio end/minute-1, and writes bench/out/memory_flat.md.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-600}
RATE=${RATE:-20000}
TRANSPORT=${TRANSPORT:-udp}
FIRST=${FIRST:-60}
BIN=${VOLLEY:-target/release/volley}
[ -x "$BIN" ] || cargo build --release -p volley
mkdir -p bench/out
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT

taskset -c 1 "$BIN" serve -p 0 -T 1 >"$out/serve.txt" 2>/dev/null &
for _ in $(seq 50); do grep -q "listening $TRANSPORT" "$out/serve.txt" 2>/dev/null && break; sleep 0.1; done
addr=$(grep "listening $TRANSPORT" "$out/serve.txt" | awk '{print $3}')

taskset -c 0 "$BIN" run "$TRANSPORT://$addr" -Q "$RATE" -l "${DURATION}s" -T 1 -q -o "$out/r.json" &
pid=$!
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0; }
first=0
last=0
for t in $(seq 1 "$DURATION"); do
  sleep 1
  kill -0 "$pid" 2>/dev/null || break
  r=$(rss)
  [ "$r" -gt 0 ] && last=$r
  [ "$t" -eq "$FIRST" ] && first=$r
  [ $((t % 30)) -eq 0 ] && echo "t=${t}s rss=${r} KiB"
done
wait "$pid"
ratio=$(awk -v a="$last" -v b="$first" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')
answered=$(python3 -c "import json;print(json.load(open('$out/r.json'))['totals']['answered'])")
{
  echo "| transport | rate | duration | RSS at ${FIRST}s | RSS at end | end / ${FIRST}s | answered |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  echo "| $TRANSPORT | $RATE | ${DURATION}s | ${first} KiB | ${last} KiB | $ratio | $answered |"
} | tee bench/out/memory_flat.md
