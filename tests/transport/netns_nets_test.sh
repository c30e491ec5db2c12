#!/usr/bin/env bash
# The nets across hosts (docs/net.md), each host a network namespace: 2 hosts on a bridge, 2 ranks each (shared
# memory within a host, the net across). For NCCL_NET=Socket and NCCL_NET=UCX (UCX_TLS=tcp: namespaces share a
# kernel, so UCX's own shared-memory transports would otherwise reach across "hosts"):
#   matrix    every collective and send/recv, checked (tests/transport/netns/netns_coll.cc); garbage sent to the
#             bootstrap root's port first must be refused and logged, and the run must still succeed;
#   kill      rank 3 (on host 2) is SIGKILLed during a stream of allreduces: ranks 0-2 must fail naming rank 3;
#   linkdown  host 2's link goes down during the stream: every rank must fail, naming a rank on the other host,
#             within CHORUS_TIMEOUT_S (plus scheduling slack).
# and with every host on two rails (a second NIC "hy" on a second bridge):
#   rails     for each net, the matrix with NCCL_SOCKET_IFNAME=hx,hy (and, for UCX, no UCX_NET_DEVICES): the net
#             offers both interfaces as devices, the host path takes a channel for each (CHORUS_HOST_NCHANNELS
#             unset), and each of host 1's NICs carries at least 1 MB each way;
#   one-nic   for each net, the same with host 2's hy down: host 2's ranks offer one device, so every rank must keep
#             to its first device and to one channel, and the matrix must pass;
#   unrouted  for each net, host 2's hy on another subnet (10.85.0.2/24), so neither host can reach the other's
#             second NIC: every rank must fail, some rank must log an address it could not reach, and no rank may
#             wait for its deadline (a connect the net failed ends every wait once the proxy judged it); again with
#             NCCL_RUNTIME_CONNECT=0, where some rank's init must fail.
# Needs root: exits 77 (skip) when namespaces cannot be made. Usage: netns_nets_test.sh <netns_coll> [nets...]
# With NETNS_NET_PLUGIN (a path or name, as NCCL_NET_PLUGIN takes it) every rank loads that NCCL net plugin, and a
# net named on the command line that is neither Socket nor UCX is the plugin's (NCCL_NET=its name): the matrix, kill
# and linkdown cases run over it (the rails, one-nic and unrouted cases, which know the built-in nets' devices and
# messages, only over Socket and UCX). The plugin's own settings (FI_PROVIDER, say) pass through the environment.
set -u
bin=${1:?usage: netns_nets_test.sh <path to netns_coll> [Socket UCX]}
shift
nets=${*:-Socket UCX}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns_hosts.sh"
pfx=nn$$
N=4
PER=2
timeout_s=8
wd=$(mktemp -d)
pids=()
status=0

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  netns_hosts_del "$pfx" 2
  rm -rf "$wd"
}
trap cleanup EXIT
trap 'exit 130' INT  # so that an interrupted or timed-out run (timeout sends TERM) still runs cleanup
trap 'exit 143' TERM

if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
  echo "SKIP: iproute2 (ip, tc) is not installed"
  exit 77
fi
if ! netns_hosts "$pfx" 2 10.83.0 10gbit 10.84.0 2>"$wd/err"; then
  echo "SKIP: cannot create bridged network namespaces ($(tail -1 "$wd/err")); run as root"
  exit 77
fi

fail() {
  echo "FAIL: $*"
  status=1
}

port=29800
ifname="=hx"
debug=WARN
extra_env=
ucx_devices=hx
# launch NET CASE MODE FIRST LAST: starts ranks FIRST..LAST of netns_coll MODE (rank r on host r / PER + 1),
# logging to $wd/NET-CASE-r.log; with NCCL_SOCKET_IFNAME=$ifname, NCCL_DEBUG=$debug, UCX_NET_DEVICES=$ucx_devices
# (unset when empty) and $extra_env (VAR=value ...).
launch() {
  local netname=$1 case=$2 mode=$3 first=$4 last=$5 r host
  for r in $(seq "$first" "$last"); do
    host=$((r / PER + 1))
    ip netns exec "${pfx}_h$host" env NCCL_COMM_ID=10.83.0.1:$port NCCL_SOCKET_IFNAME="$ifname" NCCL_NET="$netname" \
      NCCL_NET_PLUGIN="${NETNS_NET_PLUGIN:-none}" UCX_TLS=tcp ${ucx_devices:+UCX_NET_DEVICES=$ucx_devices} CHORUS_TIMEOUT_S=$timeout_s \
      NCCL_DEBUG="$debug" \
      $extra_env "$bin" "$r" $N "$mode" >"$wd/$netname-$case-$r.log" 2>&1 &
    pids[$r]=$!
  done
}

# wait_all SECONDS NET-CASE: waits for every launched rank; kills what is left at the deadline.
wait_all() {
  local end=$((SECONDS + $1)) r
  for r in "${!pids[@]}"; do
    while kill -0 "${pids[$r]}" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
    if kill -0 "${pids[$r]}" 2>/dev/null; then
      kill -9 "${pids[$r]}" 2>/dev/null
      echo "rank $r was still running at the deadline (killed)" >>"$wd/$2-$r.log"
    fi
    wait "${pids[$r]}" 2>/dev/null
  done
  pids=()
}

# wait_streaming NET CASE: until every rank started its stream (at most 60 s).
wait_streaming() {
  local end=$((SECONDS + 60)) r n
  while [ $SECONDS -lt $end ]; do
    n=0
    for r in $(seq 0 $((N - 1))); do grep -q "streaming" "$wd/$1-$2-$r.log" 2>/dev/null && n=$((n + 1)); done
    [ $n -eq $N ] && return 0
    sleep 0.1
  done
  return 1
}

# last_words LOG: what a rank said last (its FAILED line, else its last line), on one line for a FAIL message.
last_words() {
  { grep "FAILED" "$1" || tail -1 "$1"; } 2>/dev/null | tail -1 | cut -c1-240
}

show() {  # NET CASE
  local r
  for r in $(seq 0 $((N - 1))); do
    echo "---- $1 $2 rank $r (host $((r / PER + 1))) ----"
    cat "$wd/$1-$2-$r.log"
  done
}

for netname in $nets; do
  # matrix, after garbage on the bootstrap root's port
  port=$((port + 1))
  launch "$netname" matrix matrix 0 0
  sent=0
  for _ in $(seq 1 100); do
    if ip netns exec "${pfx}_h2" bash -c "exec 3<>/dev/tcp/10.83.0.1/$port && head -c 4096 /dev/urandom >&3" \
      2>/dev/null; then
      sent=1
      break
    fi
    sleep 0.05
  done
  [ $sent = 1 ] || fail "$netname: could not reach the bootstrap root to send garbage"
  launch "$netname" matrix matrix 1 $((N - 1))
  wait_all 120 "$netname-matrix"
  show "$netname" matrix
  for r in $(seq 0 $((N - 1))); do
    grep -q "rank $r: OK" "$wd/$netname-matrix-$r.log" ||
      fail "$netname matrix: rank $r did not finish OK: $(last_words "$wd/$netname-matrix-$r.log")"
  done
  want="$netname [1-9]"
  grep -q "$want" "$wd/$netname-matrix-0.log" || fail "$netname matrix: rank 0 did not run over the $netname net"
  grep -q "not a chorus bootstrap hello" "$wd/$netname-matrix-0.log" ||
    fail "$netname matrix: the garbage sent to the bootstrap root was not refused and logged"

  # kill rank 3 mid-stream
  port=$((port + 1))
  launch "$netname" kill stream 0 $((N - 1))
  if wait_streaming "$netname" kill; then
    kill -9 "${pids[3]}"
    wait_all $((3 * timeout_s)) "$netname-kill"
  else
    fail "$netname kill: the ranks did not start streaming"
    wait_all 1 "$netname-kill"
  fi
  show "$netname" kill
  for r in 0 1 2; do
    grep "FAILED" "$wd/$netname-kill-$r.log" | grep -q "rank 3 " ||
      fail "$netname kill: rank $r did not fail naming rank 3: $(last_words "$wd/$netname-kill-$r.log")"
  done

  # take host 2's link down mid-stream; then up again for the next net
  port=$((port + 1))
  launch "$netname" linkdown stream 0 $((N - 1))
  if wait_streaming "$netname" linkdown; then
    ip -n "${pfx}_h2" link set hx down
    wait_all $((3 * timeout_s)) "$netname-linkdown"
  else
    fail "$netname linkdown: the ranks did not start streaming"
    wait_all 1 "$netname-linkdown"
  fi
  ip -n "${pfx}_h2" link set hx up
  show "$netname" linkdown
  for r in $(seq 0 $((N - 1))); do
    line=$(grep "FAILED" "$wd/$netname-linkdown-$r.log")
    [ -n "$line" ] || {
      fail "$netname linkdown: rank $r did not fail: $(last_words "$wd/$netname-linkdown-$r.log")"
      continue
    }
    other="rank [01] "
    [ $((r / PER)) = 0 ] && other="rank [23] "
    echo "$line" | grep -q "$other" || fail "$netname linkdown: rank $r did not name a rank on the other host: $line"
    took=$(echo "$line" | sed -n 's/.* after \([0-9.]*\) s:.*/\1/p')
    python3 -c "import sys; sys.exit(0 if float('${took:-1e9}') <= $timeout_s + 5 else 1)" ||
      fail "$netname linkdown: rank $r took ${took:-?} s (CHORUS_TIMEOUT_S $timeout_s)"
  done
done

# bytes DEV DIR: what host 1's DEV has carried (DIR tx or rx).
bytes() { ip netns exec "${pfx}_h1" cat "/sys/class/net/$1/statistics/$2_bytes"; }

declare -A found=([Socket]="NET/Socket : interfaces hx (10.83.0.1), hy (10.84.0.1)"
  [UCX]="NET/UCX : UCX [0-9.]*, 2 device(s): hx ([0-9]* Mbit/s), hy ([0-9]* Mbit/s)")
builtin=$(for n in $nets; do case $n in Socket | UCX) echo "$n" ;; esac; done)
for netname in $builtin; do
  port=$((port + 1))
  ifname="hx,hy" debug=INFO extra_env="NCCL_DEBUG_SUBSYS=INIT,NET" ucx_devices=
  declare -A before
  for d in hx hy; do for dir in tx rx; do before[$d$dir]=$(bytes $d $dir); done; done
  launch "$netname" rails matrix 0 $((N - 1))
  wait_all 120 "$netname-rails"
  for r in $(seq 0 $((N - 1))); do
    grep -q "rank $r: OK" "$wd/$netname-rails-$r.log" || {
      show "$netname" rails
      fail "$netname rails: rank $r did not finish OK"
    }
  done
  grep -q "${found[$netname]}" "$wd/$netname-rails-0.log" ||
    fail "$netname rails: rank 0 did not find both interfaces: $(grep "NET/$netname : .*interface\|device(s):" \
      "$wd/$netname-rails-0.log")"
  grep -q "2 channels on the host path, one for each device of the net $netname" "$wd/$netname-rails-0.log" ||
    fail "$netname rails: rank 0 did not take a channel a NIC"
  grep -q "devices by channel: 0 (hx), 1 (hy)" "$wd/$netname-rails-0.log" ||
    fail "$netname rails: rank 0 did not spread its channels: $(grep "devices by channel" "$wd/$netname-rails-0.log")"
  for d in hx hy; do
    for dir in tx rx; do
      moved=$(($(bytes $d $dir) - ${before[$d$dir]}))
      echo "$netname: host 1 $d $dir: $moved bytes"
      [ "$moved" -ge 1048576 ] || fail "$netname rails: host 1's $d carried $moved bytes ($dir), under 1 MB"
    done
  done

  port=$((port + 1))
  ip -n "${pfx}_h2" link set hy down
  launch "$netname" one-nic matrix 0 $((N - 1))
  wait_all 120 "$netname-one-nic"
  for r in $(seq 0 $((N - 1))); do
    grep -q "rank $r: OK" "$wd/$netname-one-nic-$r.log" || {
      show "$netname" one-nic
      fail "$netname one-nic: rank $r did not finish OK"
    }
  done
  grep -q "channels on the host path" "$wd/$netname-one-nic-0.log" &&
    fail "$netname one-nic: rank 0 took more than one channel with a host of one NIC"
  grep -q "devices by channel: 0 (hx) (.*some rank's net offers only 1)" "$wd/$netname-one-nic-0.log" ||
    fail "$netname one-nic: rank 0 did not keep to its first device: $(grep "devices by channel" \
      "$wd/$netname-one-nic-0.log")"
  ip -n "${pfx}_h2" link set hy up
done

# What a rank logs when it cannot reach the other host's second NIC, by net.
declare -A unreachable=(
  [Socket]="connect failed.*cannot connect to 10.8[45].0.[12]:[0-9]*: Network is unreachable"
  [UCX]="connect failed.*NET/UCX : connect to 10.8[45].0.[12]:[0-9]* .*Destination is unreachable")
for netname in $builtin; do
  # Connections made by the first call, then at init (NCCL_RUNTIME_CONNECT=0), where init fails on some rank.
  for cname in unrouted unrouted-init; do
    port=$((port + 1))
    debug=WARN extra_env=
    [ "$cname" = unrouted-init ] && extra_env=NCCL_RUNTIME_CONNECT=0
    ip -n "${pfx}_h2" addr del 10.84.0.2/24 dev hy
    ip -n "${pfx}_h2" addr add 10.85.0.2/24 dev hy
    start=$SECONDS
    launch "$netname" "$cname" matrix 0 $((N - 1))
    wait_all $((3 * timeout_s)) "$netname-$cname"
    took=$((SECONDS - start))
    ip -n "${pfx}_h2" addr del 10.85.0.2/24 dev hy
    ip -n "${pfx}_h2" addr add 10.84.0.2/24 dev hy
    show "$netname" "$cname"
    for r in $(seq 0 $((N - 1))); do
      grep -q "rank $r: OK" "$wd/$netname-$cname-$r.log" && fail "$netname $cname: rank $r finished OK"
      grep -q "still running at the deadline" "$wd/$netname-$cname-$r.log" && fail "$netname $cname: rank $r hung"
      grep -Eq "is not set up after|made no progress" "$wd/$netname-$cname-$r.log" &&
        fail "$netname $cname: rank $r waited for its deadline"
    done
    echo "$netname $cname: every rank ended in $took s"
    cat "$wd/$netname-$cname"-*.log | grep -q "${unreachable[$netname]}" ||
      fail "$netname $cname: no rank named the address it could not reach"
    if [ "$cname" = unrouted-init ]; then
      cat "$wd/$netname-$cname"-*.log | grep -q "init failed: .*NCCL_RUNTIME_CONNECT=0: connecting at init failed" ||
        fail "$netname $cname: no rank's init failed"
    fi
  done
done
exit $status
