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
tag=$$
sw=chd_sw_$tag
work=$(mktemp -d)
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for i in 1 2 3 4; do ip netns del "chd_h${i}_$tag" 2>/dev/null; done
  ip netns del "$sw" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if ! ip netns add "$sw" 2>"$work/err"; then
  echo "SKIP: cannot create network namespaces ($(cat "$work/err")); run as root"
  exit 77
fi
ip -n "$sw" link add br0 type bridge || exit 1
ip -n "$sw" link set br0 up || exit 1

# shape NS DEV RATE: HTB on DEV's egress; reshape NS DEV RATE changes the rate.
shape() {
  ip netns exec "$1" tc qdisc add dev "$2" root handle 1: htb default 10 r2q 1000 || exit 1
  ip netns exec "$1" tc class add dev "$2" parent 1: classid 1:10 htb rate "$3" ceil "$3" || exit 1
}
reshape() {
  ip netns exec "$1" tc class change dev "$2" parent 1: classid 1:10 htb rate "$3" ceil "$3" || exit 1
}

for i in 1 2 3 4; do
  ns=chd_h${i}_$tag
  ip netns add "$ns" || exit 1
  ip link add "dh$i$tag" type veth peer name "ds$i$tag" || exit 1
  ip link set "dh$i$tag" netns "$ns" || exit 1
  ip link set "ds$i$tag" netns "$sw" || exit 1
  ip -n "$ns" link set "dh$i$tag" name hx || exit 1
  ip -n "$sw" link set "ds$i$tag" master br0 || exit 1
  ip -n "$ns" addr add "10.79.0.$i/24" dev hx || exit 1
  ip -n "$ns" link set lo up || exit 1
  ip -n "$ns" link set hx up || exit 1
  ip -n "$sw" link set "ds$i$tag" up || exit 1
  shape "$ns" hx 1gbit
  shape "$sw" "ds$i$tag" 1gbit
done

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
    ip netns exec "chd_h${i}_$tag" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.79.0.1 \
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

reshape "chd_h4_$tag" hx 100mbit
reshape "$sw" "ds4$tag" 100mbit
run slow 29612
rc=$?
[ "$rc" = 1 ] || fail "a slow host must make the exit status 1 (exit $rc)"
grep -q "host .* (10.79.0.4): slow with every other host" "$work/slow.txt" || fail "the slow host 10.79.0.4 is not named"
grep -q "PROBLEM host .* (10.79.0.[123]): slow" "$work/slow.txt" && fail "a fast host was named slow"
reshape "chd_h4_$tag" hx 1gbit
reshape "$sw" "ds4$tag" 1gbit

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
