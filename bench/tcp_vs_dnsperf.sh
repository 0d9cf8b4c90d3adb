#!/usr/bin/env bash
# volley run versus dnsperf over TCP against `volley serve` (see bench/README.md).
# Env: RATE (20000), DURATION (10 s per side), INFLIGHT (200), CONNECTIONS (1), CLIENT_CORE (0),
# SERVER_CORE (1), VOLLEY (a prebuilt binary), OUT_DIR (bench/out).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
vs_dnsperf tcp
