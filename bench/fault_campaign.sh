#!/usr/bin/env bash
# The fault campaign (docs/reliability.md, "Fault campaign"): every transport (udp, tcp, dot,
# doh1.1, doh2, doh3, doq) at 200 qps for 10 s with a 1 s timeout, and each fault at second 3:
# the link down for 2 s, a loss burst, 30 % loss for 5 s, the server SIGKILLed and restarted on
# the same ports, the server resetting connections, the server reading nothing for 3 s,
# answers corrupted in flight for 2 s, a certificate that changes mid-run. Each cell checks
# the accounting, one fate per query, the run's end (duration + timeout), the generator's
# peak RSS against the same transport without a fault, and that the results name what
# happened. It prints one markdown row per cell and writes the table.
#
#   bench/fault_campaign.sh                  # the whole matrix, seed 1 (about 11 minutes)
#   SEED=7 bench/fault_campaign.sh           # another seed (the link's and the proxy's choices)
#   ONLY=dot,doq:4 bench/fault_campaign.sh   # part: a transport, or TRANSPORT:FAULT-INDEX
#                                            # (0 none, 1 link down, 2 loss burst, 3 30 % loss,
#                                            # 4 kill, 5 reset, 6 reads nothing, 7 corrupt,
#                                            # 8 certificate)
#   TABLE=out.md KEEP=dir bench/fault_campaign.sh   # where the table goes; keep each results file
#
# The cells are the same code as the tests in crates/cli/tests/faults.rs (its ignored test
# `campaign`); a failed cell fails the script (exit 1) after the whole table is written.
# `--link` needs root (a network namespace and TUN devices), as `volley link` does.
set -euo pipefail
cd "$(dirname "$0")/.."
export VOLLEY_FAULT_SEED="${SEED:-1}"
export VOLLEY_FAULT_ONLY="${ONLY:-}"
export VOLLEY_FAULT_TABLE="${TABLE:-${CARGO_TARGET_DIR:-target}/fault_campaign.md}"
[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && export VOLLEY_FAULT_KEEP="$KEEP"
mkdir -p "$(dirname "$VOLLEY_FAULT_TABLE")"
cargo test -p volley --test faults -- --ignored --exact campaign --nocapture --test-threads 1
