#!/usr/bin/env bash
# chorus-doctor across four "hosts": network namespaces h1..h4 on a bridge (in a fifth namespace), each link shaped
# with HTB to 1 Gbit/s both ways, one rank per host, launched with torchrun's variables. Four runs:
#   healthy                           exit 0, nothing named
#   host 4's link at a tenth          exit 1, host 4 named as slow with every other host
#   NCCL_SOCKET_IFNAME wrong on host 3 exit 1, host 3 named with the variable
#   NCCL_PROTO different on rank 1    exit 1, the variable and rank 1 named
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN): exits 77 (skip) when namespaces cannot be created.
#
# Usage: doctor_netns_test.sh <chorus-doctor> [--keep DIR]   (--keep: leave the reports and heatmaps in DIR)
set -u
doctor=${1:?usage: doctor_netns_test.sh <chorus-doctor> [--keep DIR]}
keep=""
if [ "${2:-}" = "--keep" ]; then keep=${3:?}; fi
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../scripts/netns_hosts.sh"
net=cd$$  # namespaces cd<pid>_h1..4 and cd<pid>_sw
work=$(mktemp -d)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  netns_hosts_del "$net" 4
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT  # so that an interrupted or timed-out run (timeout sends TERM) still runs cleanup
trap 'exit 143' TERM

if ! ip netns add "${net}_probe" 2>"$work/err"; then
  echo "SKIP: cannot create network namespaces ($(cat "$work/err")); run as root"
  exit 77
fi
ip netns del "${net}_probe"
netns_hosts "$net" 4 10.79.0 1gbit || exit 1

# run NAME PORT [rank:VAR=VALUE ...]: one doctor per host; rank 0 writes NAME.txt, .json and .png.
run() {
  local name=$1 port=$2
  shift 2
  pids=()
  for r in 0 1 2 3; do
    local i=$((r + 1)) extra=()
    for e in "$@"; do
      if [ "${e%%:*}" = "$r" ]; then extra+=("${e#*:}"); fi
    done
    ip netns exec "${net}_h$i" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.79.0.1 \
      MASTER_PORT="$port" CHORUS_TIMEOUT_S=60 NCCL_SOCKET_IFNAME==hx "${extra[@]}" \
      "$doctor" --bytes 262144 --json "$work/$name.json" --png "$work/$name.png" \
      >"$work/$name.$r.out" 2>"$work/$name.$r.err" &
    pids+=($!)
  done
  local rc=0 st
  for r in 0 1 2 3; do
    wait "${pids[$r]}"
    st=$?
    if [ "$r" = 0 ]; then rc=$st; fi
  done
  pids=()
  cp "$work/$name.0.out" "$work/$name.txt"
  echo "---- $name (exit $rc) ----"
  cat "$work/$name.txt"
  return "$rc"
}

status=0
fail() {
  echo "FAIL: $*"
  status=1
}

run healthy 29611
rc=$?
[ "$rc" = 0 ] || fail "a healthy cluster must exit 0 (exit $rc)"
grep -q "Findings: nothing wrong" "$work/healthy.txt" || fail "a healthy cluster must name nothing"

netns_reshape "$net" 4 100mbit || exit 1
run slow 29612
rc=$?
[ "$rc" = 1 ] || fail "a slow host must make the exit status 1 (exit $rc)"
grep -q "host .* (10.79.0.4): slow with every other host" "$work/slow.txt" || fail "the slow host 10.79.0.4 is not named"
grep -q "PROBLEM host .* (10.79.0.[123]): slow" "$work/slow.txt" && fail "a fast host was named slow"
netns_reshape "$net" 4 1gbit || exit 1

run ifname 29613 2:NCCL_SOCKET_IFNAME=nosuch0
rc=$?
[ "$rc" = 1 ] || fail "a wrong NCCL_SOCKET_IFNAME must make the exit status 1 (exit $rc)"
grep -q "host .* (10.79.0.3): NCCL_SOCKET_IFNAME=nosuch0 matches none of its interfaces" "$work/ifname.txt" ||
  fail "host 3's NCCL_SOCKET_IFNAME is not named"

run proto 29614 1:NCCL_PROTO=LL
rc=$?
[ "$rc" = 1 ] || fail "a rank with another NCCL_PROTO must make the exit status 1 (exit $rc)"
grep -q "NCCL_PROTO differs between ranks: LL on rank 1 on .* (10.79.0.2)" "$work/proto.txt" ||
  fail "rank 1's NCCL_PROTO is not named"

if [ -n "$keep" ]; then
  mkdir -p "$keep" && cp "$work"/*.txt "$work"/*.json "$work"/*.png "$keep"/ 2>/dev/null
fi
if [ $status -ne 0 ]; then
  for f in "$work"/*.err; do echo "---- $f"; tail -5 "$f"; done
fi
exit $status
