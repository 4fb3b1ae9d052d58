#!/usr/bin/env bash
# A wide-area network between worker jobs on one Linux machine (root; network namespaces, veth
# pairs, a bridge and tc netem), to run DiLoCo workers or any other processes as if on distant sites.
#
#   scripts/wan.sh up N [--rtt-ms MS] [--rate RATE] [--loss PCT] [--jitter-ms MS]
#   scripts/wan.sh check [--seconds S]     # measure worker 0 -> worker 1 against the settings
#   scripts/wan.sh exec I CMD...           # run CMD in worker I's namespace (environment kept)
#   scripts/wan.sh status                  # what is configured
#   scripts/wan.sh down                    # remove it all; a no-op if nothing is there
#
# `up` (which first does `down`) makes namespaces strata-w0 ... strata-w{N-1}; namespace i holds
# `wan0` = 10.77.0.(i+1)/24 (plus loopback), the end of a veth pair whose other end, strata-v<i>,
# is a port of the bridge strata-br = 10.77.0.254/24 in the root namespace. A service bound
# there (a Redis rendezvous store, an MPI launcher) is reachable from every worker.
# Defaults: --rtt-ms 100, --rate 1gbit (tc's units: bit kbit mbit gbit, 1000-based), no loss or
# jitter.
#
# What is shaped: every worker's outgoing traffic, by `tc qdisc netem delay RTT/2 [jitter] [loss]
# rate RATE` on wan0's egress; and the root namespace's outgoing traffic by the same netem on the
# bridge device strata-br (the bridge forwards worker-to-worker frames port to port, so they never
# pass strata-br's own qdisc). So each direction crosses exactly one shaped egress:
#   worker i <-> worker j   RTT = RTT/2 + RTT/2, each worker sends at most RATE (to all peers)
#   worker i <-> the store  the same: the store is one more site with a link like a worker's,
#                           whose RATE its replies to all workers share.
# Loss applies on each egress, so a round trip loses ~2 × PCT. Jitter (normal around the delay)
# may reorder packets. The netem queue holds twice the link's bandwidth-delay product, and each
# namespace's TCP buffers may grow to 64 MiB, as a host tuned for a long fat link would.
#
# Kernels built without netem (CONFIG_NET_SCH_NETEM; some VM kernels) get the same links from a
# delay line: each site's egress (wan0, strata-br) has a tbf qdisc for the rate, and its ingress
# an iptables NFQUEUE rule (INPUT, so only traffic to that site) that hands packets to
# scripts/wan_delay.py (one stdlib Python process per namespace; delay RTT/2, jitter, loss).
# Delay on ingress, not egress: a packet held on its sender's egress still counts against TCP
# Small Queues' budget (~1 ms of data below the socket; netem frees it, NFQUEUE does not) and the
# sender stalls at a few percent of the rate. Each direction still crosses one delay and one rate
# limit; the delay line adds about 1 ms to the round trip. Needs the iptables package
# (scripts/setup.sh). `status` says which is in use; the settings and the delay lines' pids and
# logs are in /run/strata-wan/. The root namespace's own settings (TCP buffers) are not changed.
set -euo pipefail
SCRIPTS=$(cd "$(dirname "$0")" && pwd) # not cd'ed into: `exec` runs in the caller's directory

PREFIX=strata-w
BRIDGE=strata-br
SUBNET=10.77.0
RUN_DIR=/run/strata-wan
STATE=$RUN_DIR/config.env
PROBE_PORT=47700
ROOT_QUEUE=7700 # the store side's NFQUEUE number (delay-line mode); each worker's is 0

die() {
  echo "error: wan.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '5,9p' "$0" | sed 's/^# //' >&2
  exit 2
}

# Bits per second of a tc rate (e.g. 100mbit, 1gbit, 500kbit).
rate_to_bps() {
  local rate=${1,,}
  [[ $rate =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] ||
    die "--rate '$1': want a number and one of bit, kbit, mbit, gbit, tbit (e.g. 1gbit)"
  local -A scale=([bit]=1 [kbit]=1e3 [mbit]=1e6 [gbit]=1e9 [tbit]=1e12)
  awk -v n="${BASH_REMATCH[1]}" -v s="${scale[${BASH_REMATCH[3]}]}" 'BEGIN { printf "%.0f", n * s }'
}

positive() { awk -v x="$1" 'BEGIN { exit !(x > 0) }'; }

workers() { ip netns list 2>/dev/null | awk -v p="$PREFIX" '$1 ~ "^" p "[0-9]+$" { print $1 }'; }

down() {
  local ns link pid_file pid
  for pid_file in "$RUN_DIR"/delay-*.pid; do
    [[ -f $pid_file ]] || continue
    pid=$(<"$pid_file")
    # Only a delay line this script started (a stale pid may be someone else's by now).
    if grep -q wan_delay.py "/proc/$pid/cmdline" 2>/dev/null; then kill "$pid"; fi
  done
  while iptables -t mangle -D INPUT -i "$BRIDGE" -j NFQUEUE --queue-num "$ROOT_QUEUE" \
    2>/dev/null; do :; done
  for ns in $(workers); do ip netns delete "$ns"; done
  # Deleting a namespace deletes its veth pair; these are leftovers of an interrupted `up`.
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | sed 's/@.*//' |
    grep -E '^strata-[vp][0-9]+$' || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  ip link delete "$BRIDGE" 2>/dev/null || true
  rm -rf "$RUN_DIR"
}

# The netem arguments for one egress (both ends use the same).
netem_args() {
  local one_way_ms=$ONE_WAY_MS jitter_part=() loss_part=() limit
  if positive "$JITTER_MS"; then jitter_part=("${JITTER_MS}ms" distribution normal); fi
  if positive "$LOSS"; then loss_part=(loss "${LOSS}%"); fi
  # Queue limit in packets: twice the bandwidth-delay product in 1500-byte packets, plus slack, so
  # that the queue of packets waiting out the delay does not drop at full rate (netem's default
  # limit, 1000 packets, is 1.5 MB: 12 ms at 1 Gbit/s).
  limit=$(awk -v b="$RATE_BPS" -v d="$one_way_ms" -v j="$JITTER_MS" \
    'BEGIN { printf "%d", 2 * b * (d + 3 * j) / 1000 / 8 / 1500 + 1000 }')
  echo delay "${one_way_ms}ms" "${jitter_part[@]}" "${loss_part[@]}" rate "$RATE" limit "$limit"
}

# tbf for the rate in delay-line mode: a burst of at least 1 ms at the rate or one 64 KiB GSO
# packet, a queue of one bandwidth-delay product (at least 1 MiB).
tbf_args() {
  awk -v b="$RATE_BPS" -v r="$RTT_MS" 'BEGIN {
    burst = b / 8 / 1000; if (burst < 131072) burst = 131072
    limit = b / 8 * r / 1000; if (limit < 1048576) limit = 1048576
    printf "rate %.0fbit burst %d limit %d\n", b, burst, limit }'
}

# Shapes one site's link: DEVICE in namespace NS ("" for the root namespace), in MODE. netem
# delays on egress; the delay line on ingress, where a packet has already left its sender's
# socket accounting (held on egress, it would count against TCP Small Queues' ~1 ms of data below
# the socket, and the sender would stall at a few percent of the rate).
shape() {
  local ns=$1 device=$2 tc=(tc) run=() name=${1:-root}
  [[ -n $ns ]] && tc=(tc -n "$ns") && run=(ip netns exec "$ns")
  if [[ $MODE == netem ]]; then
    "${tc[@]}" qdisc add dev "$device" root netem "${netem[@]}"
    return
  fi
  local tbf
  read -ra tbf <<<"$(tbf_args)"
  "${tc[@]}" qdisc add dev "$device" root tbf "${tbf[@]}"
  local queue=0 ready=$RUN_DIR/delay-$name.pid
  [[ -z $ns ]] && queue=$ROOT_QUEUE
  "${run[@]}" nohup python3 "$SCRIPTS"/wan_delay.py --queue "$queue" --delay-ms "$ONE_WAY_MS" \
    --jitter-ms "$JITTER_MS" --loss "$LOSS" --ready-file "$ready" \
    </dev/null >"$RUN_DIR/delay-$name.log" 2>&1 &
  local waited
  for ((waited = 0; waited < 100; waited++)); do
    [[ -s $ready ]] && break
    kill -0 $! 2>/dev/null || die "the delay line of $name failed: $(cat "$RUN_DIR/delay-$name.log")"
    sleep 0.05
  done
  [[ -s $ready ]] || die "the delay line of $name did not start in 5 s"
  "${run[@]}" iptables -t mangle -A INPUT -i "$device" -j NFQUEUE --queue-num "$queue"
}

up() {
  [[ ${1:-} =~ ^[0-9]+$ ]] || usage
  local n=$1
  shift
  ((n >= 1 && n <= 253)) || die "N must be 1 to 253 (addresses 10.77.0.1 to .253), got $n"
  RTT_MS=100 RATE=1gbit LOSS=0 JITTER_MS=0
  while (($#)); do
    [[ $# -ge 2 ]] || die "$1 needs a value"
    case $1 in
      --rtt-ms) RTT_MS=$2 ;;
      --rate) RATE=$2 ;;
      --loss) LOSS=$2 ;;
      --jitter-ms) JITTER_MS=$2 ;;
      *) die "unknown option '$1'" ;;
    esac
    shift 2
  done
  local number='^[0-9]+(\.[0-9]+)?$'
  [[ $RTT_MS =~ $number ]] || die "--rtt-ms '$RTT_MS': want a number of milliseconds"
  [[ $LOSS =~ $number ]] || die "--loss '$LOSS': want a percentage (e.g. 0.1)"
  [[ $JITTER_MS =~ $number ]] || die "--jitter-ms '$JITTER_MS': want a number of milliseconds"
  RATE_BPS=$(rate_to_bps "$RATE")

  local probe=strata-wan-probe$$ message
  message=$(ip netns add "$probe" 2>&1) ||
    die "cannot create a network namespace (ip netns add needs root with CAP_SYS_ADMIN and" \
      "CAP_NET_ADMIN): $message"
  ip netns delete "$probe"
  down

  ONE_WAY_MS=$(awk -v r="$RTT_MS" 'BEGIN { printf "%g", r / 2 }')
  read -ra netem <<<"$(netem_args)"
  mkdir -p "$RUN_DIR"
  # The root namespace's iptables never see bridged frames (nf_call_iptables 0): workers' traffic
  # to each other is theirs alone.
  ip link add "$BRIDGE" type bridge nf_call_iptables 0
  ip addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  MODE=netem
  if ! message=$(tc qdisc add dev "$BRIDGE" root netem "${netem[@]}" 2>&1); then
    [[ $message == *"qdisc kind is unknown"* ]] || die "tc netem on $BRIDGE: $message"
    command -v iptables >/dev/null ||
      die "this kernel has no tc netem, and the delay line that replaces it needs iptables" \
        "(bash scripts/setup.sh installs it)"
    MODE=delay-line
    shape "" "$BRIDGE"
  fi
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$PREFIX$i
    ip netns add "$ns"
    ip link add "strata-v$i" type veth peer name "strata-p$i"
    ip link set "strata-p$i" netns "$ns"
    ip link set "strata-v$i" master "$BRIDGE" up
    ip -n "$ns" link set "strata-p$i" name wan0
    ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev wan0
    ip -n "$ns" link set wan0 up
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_rmem="4096 131072 67108864" \
      net.ipv4.tcp_wmem="4096 16384 67108864"
    shape "$ns" wan0
  done
  printf 'N=%s\nRTT_MS=%s\nRATE=%s\nRATE_BPS=%s\nLOSS=%s\nJITTER_MS=%s\nMODE=%s\n' \
    "$n" "$RTT_MS" "$RATE" "$RATE_BPS" "$LOSS" "$JITTER_MS" "$MODE" >"$STATE"
  echo "wan: $n workers $PREFIX{0..$((n - 1))} at $SUBNET.1-$n, store side $SUBNET.254;" \
    "rtt ${RTT_MS} ms, rate $RATE per egress, loss ${LOSS}%, jitter ${JITTER_MS} ms ($MODE)"
}

load_state() {
  [[ -f $STATE ]] || die "no WAN is up (scripts/wan.sh up N first)"
  # shellcheck source=/dev/null
  source "$STATE"
}

status() {
  if [[ ! -f $STATE ]]; then
    echo "wan: down"
    return
  fi
  load_state
  echo "wan: $N workers, rtt ${RTT_MS} ms, rate $RATE ($RATE_BPS bit/s) per egress," \
    "loss ${LOSS}%, jitter ${JITTER_MS} ms, by $MODE"
  local ns name pid
  for ns in "" $(workers); do
    name=${ns:-root}
    if [[ -z $ns ]]; then
      printf '  store side: %s %s.254  %s\n' "$BRIDGE" "$SUBNET" "$(tc qdisc show dev "$BRIDGE" | head -1)"
    else
      printf '  %s: wan0 %s  %s\n' "$ns" "$(ip -n "$ns" -4 -o addr show dev wan0 | awk '{ print $4 }')" \
        "$(tc -n "$ns" qdisc show dev wan0 | head -1)"
    fi
    [[ $MODE == delay-line ]] || continue
    pid=$(cat "$RUN_DIR/delay-$name.pid" 2>/dev/null || true)
    if [[ -n $pid ]] && grep -q wan_delay.py "/proc/$pid/cmdline" 2>/dev/null; then
      echo "    delay line: pid $pid, log $RUN_DIR/delay-$name.log"
    else
      echo "    delay line: NOT RUNNING (see $RUN_DIR/delay-$name.log; scripts/wan.sh up again)"
    fi
  done
}

check() {
  local seconds=3
  while (($#)); do
    case $1 in
      --seconds) seconds=${2:?--seconds needs a value} && shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  load_state
  ((N >= 2)) || die "check needs at least 2 workers (up with N >= 2)"
  local judge_rate=1 status=0 server
  if positive "$LOSS"; then judge_rate=0; fi
  echo "wan check: worker 0 ($SUBNET.1) -> worker 1 ($SUBNET.2), then worker 0 -> store ($SUBNET.254)"
  ip netns exec "${PREFIX}1" python3 "$SCRIPTS"/wan_probe.py serve "$SUBNET.2" "$PROBE_PORT" &
  server=$!
  ip netns exec "${PREFIX}0" python3 "$SCRIPTS"/wan_probe.py measure "$SUBNET.2" "$PROBE_PORT" \
    --label "w0->w1   " --rtt-ms "$RTT_MS" --rate-bps "$RATE_BPS" --seconds "$seconds" \
    --judge-rate "$judge_rate" || { status=1; kill "$server" 2>/dev/null || true; }
  wait "$server" 2>/dev/null || true
  python3 "$SCRIPTS"/wan_probe.py serve "$SUBNET.254" "$PROBE_PORT" --connections 1 &
  server=$!
  ip netns exec "${PREFIX}0" python3 "$SCRIPTS"/wan_probe.py measure "$SUBNET.254" "$PROBE_PORT" \
    --label "w0->store" --rtt-ms "$RTT_MS" --rate-bps "$RATE_BPS" --rtt-only ||
    { status=1; kill "$server" 2>/dev/null || true; }
  wait "$server" 2>/dev/null || true
  return $status
}

command=${1:-}
(($#)) && shift
case $command in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  check) check "$@" ;;
  exec)
    [[ ${1:-} =~ ^[0-9]+$ && $# -ge 2 ]] || usage
    ns=$PREFIX$1
    shift
    ip netns list | awk '{ print $1 }' | grep -qx "$ns" || die "no namespace $ns (scripts/wan.sh up N)"
    exec ip netns exec "$ns" "$@"
    ;;
  *) usage ;;
esac
