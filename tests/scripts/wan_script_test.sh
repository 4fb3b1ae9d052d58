#!/usr/bin/env bash
# scripts/wan.sh end to end: two workers at 20 ms RTT and 100 Mbit/s, `check` (worker-to-worker
# RTT and throughput, worker-to-store RTT through the bridge), `exec` (the environment passes
# through), `down` (nothing left). Needs root: without the right to make network namespaces it
# fails, saying so; it never skips. It refuses to run while a WAN is already up rather than tear
# down someone's setup. About 6 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
[[ ! -e /run/strata-wan/config.env ]] ||
  fail "a WAN from scripts/wan.sh is up on this machine; this test would replace it (scripts/wan.sh down first)"
trap 'bash scripts/wan.sh down' EXIT
bash scripts/wan.sh up 2 --rtt-ms 20 --rate 100mbit ||
  fail "scripts/wan.sh up failed (it needs root: network namespaces, a bridge, tc, iptables)"
bash scripts/wan.sh check --seconds 2 || fail "scripts/wan.sh check: the link is not as configured"
address=$(STRATA_WAN_TEST=passed bash scripts/wan.sh exec 1 \
  sh -c 'echo "$STRATA_WAN_TEST $(ip -4 -o addr show dev wan0)"')
[[ $address == "passed "*"10.77.0.2/24"* ]] || fail "exec 1: got '$address'"
bash scripts/wan.sh down
trap - EXIT
left=$(ip netns list | grep -E '^strata-w[0-9]+' || true)$(ip -o link show | grep -E 'strata-' || true)
[[ -z $left ]] || fail "down left: $left"
echo "wan_script: ok"
