#!/usr/bin/env bash
# Multi-host test through network namespaces: two namespaces joined by a veth pair
# (10.77.0.1/24 and 10.77.0.2/24) play two hosts; rank 0 runs in the first and hosts the
# bootstrap root (NCCL_COMM_ID), rank 1 in the second. Both must finish a 1M-float allreduce
# over the socket net. Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN): exits 77 (skip)
# when namespaces cannot be created.
#
# Usage: netns_test.sh <path to netns_rank>
set -u

rank_bin=${1:?usage: netns_test.sh <path to netns_rank>}
tag=$$
ns1=chorus_a_$tag
ns2=chorus_b_$tag
veth1=vcha$tag  # interface names stay under 16 characters for any pid
veth2=vchb$tag
port=29517
workdir=$(mktemp -d)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns1" 2>/dev/null
  ip netns del "$ns2" 2>/dev/null  # deleting a namespace also deletes its end of the veth pair
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT  # so that an interrupted or timed-out run (timeout sends TERM) still runs cleanup
trap 'exit 143' TERM

if ! command -v ip >/dev/null 2>&1; then
  echo "SKIP: iproute2 (ip) is not installed"
  exit 77
fi
. "$(cd "$(dirname "$0")" && pwd)/../../scripts/netns_hosts.sh"  # netns_add: retried namespace creation
if ! netns_add "$ns1" 2>"$workdir/err"; then
  echo "SKIP: cannot create network namespaces ($(cat "$workdir/err")); run as root"
  exit 77
fi
netns_add "$ns2" || exit 1
if ! ip link add "$veth1" type veth peer name "$veth2" 2>"$workdir/err"; then
  echo "SKIP: cannot create a veth pair ($(cat "$workdir/err"))"
  exit 77
fi
ip link set "$veth1" netns "$ns1" || exit 1
ip link set "$veth2" netns "$ns2" || exit 1
ip -n "$ns1" addr add 10.77.0.1/24 dev "$veth1" || exit 1
ip -n "$ns2" addr add 10.77.0.2/24 dev "$veth2" || exit 1
for ns in "$ns1" "$ns2"; do
  ip -n "$ns" link set lo up || exit 1
done
ip -n "$ns1" link set "$veth1" up || exit 1
ip -n "$ns2" link set "$veth2" up || exit 1

export NCCL_COMM_ID=10.77.0.1:$port
export CHORUS_TIMEOUT_S=${CHORUS_TIMEOUT_S:-60}
ip netns exec "$ns1" env NCCL_SOCKET_IFNAME="=$veth1" "$rank_bin" 0 2 >"$workdir/rank0.log" 2>&1 &
pids+=($!)
ip netns exec "$ns2" env NCCL_SOCKET_IFNAME="=$veth2" "$rank_bin" 1 2 >"$workdir/rank1.log" 2>&1 &
pids+=($!)

status=0
for r in 0 1; do
  if ! wait "${pids[$r]}"; then
    status=1
  fi
  if ! grep -q "rank $r: OK" "$workdir/rank$r.log"; then
    status=1
  fi
done
pids=()
for r in 0 1; do
  echo "---- rank $r (namespace $([ $r = 0 ] && echo "$ns1" || echo "$ns2")) ----"
  cat "$workdir/rank$r.log"
done
if [ $status -ne 0 ]; then
  echo "FAIL: the two-namespace allreduce did not complete on both ranks"
  exit $status
fi

# A rank on the other host that exits right after init, before any connection to it exists: rank 0 must name it
# (no pid to check across hosts). Rank 0 starts its allreduce only once rank 1's process is gone.
export NCCL_COMM_ID=10.77.0.1:$((port + 1))
go="$workdir/rank1-gone"
ip netns exec "$ns1" env NCCL_SOCKET_IFNAME="=$veth1" "$rank_bin" 0 2 --peer-gone "$go" >"$workdir/gone0.log" 2>&1 &
pids+=($!)
ip netns exec "$ns2" env NCCL_SOCKET_IFNAME="=$veth2" "$rank_bin" 1 2 --peer-gone "$go" >"$workdir/gone1.log" 2>&1
touch "$go"
if ! wait "${pids[0]}" || ! grep -q "rank 0: OK" "$workdir/gone0.log"; then
  status=1
fi
pids=()
echo "---- peer gone before connecting: rank 0 (namespace $ns1) ----"
cat "$workdir/gone0.log"
if [ $status -ne 0 ]; then
  echo "FAIL: rank 0 did not name rank 1 (gone before connecting) promptly"
fi
exit $status
