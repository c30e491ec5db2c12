#!/usr/bin/env bash
# Rings across hosts: 4 network-namespace hosts on a bridge, 2 ranks each (shared memory within a host, sockets
# across), every host's link shaped with HTB to RATE both ways. Measures the link's TCP goodput with iperf3, then
# all_reduce_perf, all_gather_perf and reduce_scatter_perf with the ranks placed host by host (rank r on host r / 2)
# and round-robin (rank r on host r % 4), each with rings (NCCL_ALGO=ring) host by host and in rank order
# (CHORUS_RING_BY_HOST=1 and 0), hierarchical (NCCL_ALGO=Hierarchical), the tuner's own choice (NCCL_ALGO
# unset), for allgather and reduce-scatter rail (NCCL_ALGO=Rail), and for allreduce trees over the host order
# (node-aware) and rank order (NCCL_ALGO=Tree); CONFIGS may add others (RecDoubling:1). Prints a Markdown table of
# time and of the share of the link bound reached: allreduce must move 2(H-1)/H x S through each host's link, allgather
# (H-1)/H x S_out and reduce-scatter (H-1)/H x S_in (H hosts, S bytes a rank), at the iperf3 goodput; sendrecv_perf
# (in TOOLS; each rank sends S to rank r+1) S host by host (one rank's message leaves each host) and 2 x S round-robin
# (every rank's). A benchmark, not a test. Needs root, iperf3 and python3.
#
# Usage: perf/netns_ring_bench.sh BUILD_DIR OUT_DIR [RATE (default 1gbit)] [MAX_BYTES (default 64M)] [TOOLS]
# TOOLS: the perf tools to run, space-separated (default: all three). In the environment: MIN_BYTES, the smallest
# size (default 1M); FACTOR, the step between sizes (default 4); ITERS, timed iterations a size (default 5); WARMUP, the perf tools' warm-up calls (-w, default 1); CONFIGS, the runs as ALGO:CHORUS_RING_BY_HOST
# (default "ring:1 ring:0 Hierarchical:1 Rail:1 default:1 Tree:1 Tree:0"); HOST_SYSCTL, key=value settings applied
# with sysctl in every host's namespace (e.g. net.ipv4.tcp_slow_start_after_idle=0); RAILS=2 gives every host a
# second NIC on a second rail (hy, 10.82.0.i, shaped to RATE too), the ranks NCCL_SOCKET_IFNAME==hx,hy, and the
# bound the sum of both rails' goodput, measured at once. TCP_CC, the hosts' TCP congestion control (default cubic,
# Linux's and Debian's default; a namespace otherwise takes the kernel's, bbr on some, under which schedules with
# several flows a link ran up to 17% slower here: docs/perf/net.md, "TCP congestion control").
set -u
build=${1:?usage: netns_ring_bench.sh BUILD_DIR OUT_DIR [RATE] [MAX_BYTES]}
out=${2:?usage: netns_ring_bench.sh BUILD_DIR OUT_DIR [RATE] [MAX_BYTES]}
rate=${3:-1gbit}
maxb=${4:-64M}
tools=${5:-all_reduce_perf all_gather_perf reduce_scatter_perf}
build=$(cd "$build" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/netns_hosts.sh"
net=rb$$  # namespaces rb<pid>_h1..4 and rb<pid>_sw
H=4
PER=2
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  netns_hosts_del "$net" $H
}
trap cleanup EXIT
trap 'exit 130' INT  # so that an interrupted or timed-out run (timeout sends TERM) still runs cleanup
trap 'exit 143' TERM

rails=${RAILS:-1}
export NETNS_TCP_CC=${TCP_CC:-cubic}
case $rails in 1) netns_hosts "$net" $H 10.81.0 "$rate" || exit 1; ifname="=hx" ;;
  2) netns_hosts "$net" $H 10.81.0 "$rate" 10.82.0 || exit 1; ifname="=hx,hy" ;;
  *) echo "RAILS must be 1 or 2"; exit 2 ;;
esac
for kv in ${HOST_SYSCTL:-}; do
  for i in $(seq 1 $H); do ip netns exec "${net}_h$i" sysctl -qw "$kv" || exit 1; done
done

# Goodput of one host's link (each rail's, at once), one stream each way at once (as a ring hop's two directions
# run).
ip netns exec "${net}_h2" iperf3 -s -D -1 -p 5201 >/dev/null 2>&1
if [ "$rails" = 2 ]; then ip netns exec "${net}_h2" iperf3 -s -D -1 -p 5202 >/dev/null 2>&1; fi
sleep 0.5
if [ "$rails" = 2 ]; then
  ip netns exec "${net}_h1" iperf3 -c 10.82.0.2 -p 5202 -t 5 --bidir -J >"$out/iperf3-hy.json" 2>&1 &
fi
ip netns exec "${net}_h1" iperf3 -c 10.81.0.2 -p 5201 -t 5 --bidir -J >"$out/iperf3.json" 2>&1
wait
goodput=$(python3 -c '
import json,sys
total = 0
for path in sys.argv[1:]:
    e=json.load(open(path))["end"]
    total += min(e["sum_sent"]["bits_per_second"], e["sum_sent_bidir_reverse"]["bits_per_second"])/8
print(total)
' "$out/iperf3.json" $([ "$rails" = 2 ] && echo "$out/iperf3-hy.json")) ||
  { echo "iperf3 failed: $(tail -3 "$out"/iperf3*.json)"; exit 1; }
echo "link $rate x $rails rail(s): TCP goodput $(python3 -c "print(round($goodput/1e6,1))") MB/s each way (iperf3 --bidir, 5 s, rails summed; TCP $NETNS_TCP_CC)"

# run TOOL PLACEMENT BYHOST ALGO: 8 ranks, JSON to $out/TOOL-PLACEMENT-BYHOST[-ALGO].json.
port=29700
run() {
  local tool=$1 place=$2 byhost=$3 algo=$4 n=$((H * PER))
  local name=$tool-$place-$byhost
  if [ "$algo" != ring ]; then name=$name-$algo; fi
  if [ "$algo" = default ]; then algo=; fi
  port=$((port + 2))
  pids=()
  for r in $(seq 0 $((n - 1))); do
    local h lr
    if [ "$place" = host ]; then h=$((r / PER + 1)); lr=$((r % PER)); else h=$((r % H + 1)); lr=$((r / H)); fi
    ip netns exec "${net}_h$h" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$PER \
      MASTER_ADDR=10.81.0.1 MASTER_PORT=$port NCCL_SOCKET_IFNAME="$ifname" CHORUS_RING_BY_HOST=$byhost NCCL_ALGO=$algo \
      CHORUS_TIMEOUT_S=120 "$build/perf/$tool" -b "${MIN_BYTES:-1M}" -e "$maxb" -f "${FACTOR:-4}" -n "${ITERS:-5}" -w "${WARMUP:-1}" \
      --json "$out/$name.json" >"$out/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  pids=()
  return $rc
}

for tool in $tools; do
  for place in host cyclic; do
    for cfg in ${CONFIGS:-ring:1 ring:0 Hierarchical:1 Rail:1 default:1 Tree:1 Tree:0}; do
      algo=${cfg%%:*} byhost=${cfg##*:}
      if [ "$algo" = Tree ] && [ "$tool" != all_reduce_perf ]; then continue; fi
      if [ "$algo" = Rail ] && [ "$tool" = all_reduce_perf ]; then continue; fi
      if ! run $tool $place $byhost $algo; then
        echo "$tool $place CHORUS_RING_BY_HOST=$byhost NCCL_ALGO=$algo failed"
      fi
    done
  done
done

python3 - "$out" "$goodput" "$H" "$rate" "$PER" <<'EOF'
import json, os, sys
out, goodput, H, rate, PER = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
print(f"\n| collective | algorithm | placement | CHORUS_RING_BY_HOST | size (bytes) | time (ms) | busbw (GB/s) | link bound (ms) | share of bound |")
print("|---|---|---|---|---|---|---|---|---|")
for tool, coll in (("all_reduce_perf", "allreduce"), ("all_gather_perf", "allgather"),
                   ("reduce_scatter_perf", "reduce-scatter"), ("sendrecv_perf", "sendrecv")):
    for place in ("host", "cyclic"):
        for algo, byhost, suffix in (("ring", "1", ""), ("ring", "0", ""), ("hierarchical", "1", "-Hierarchical"),
                                     ("rail", "1", "-Rail"), ("tuner's choice", "1", "-default"),
                                     ("tree", "1", "-Tree"), ("tree", "0", "-Tree"),
                                     ("recursive doubling", "1", "-RecDoubling")):
            path = f"{out}/{tool}-{place}-{byhost}{suffix}.json"
            if not os.path.exists(path):
                continue
            d = json.load(open(path))
            for row in d["results"]:
                size = row["size"]  # nccl-tests' size column: allreduce the buffer, allgather the output,
                                    # reduce-scatter the input
                t_us = row["out_of_place"]["time"]
                link = (2 if coll == "allreduce" else 1) * (H - 1) / H * size  # bytes through each host's link
                if coll == "sendrecv":  # rank r to rank r+1: one rank's message leaves a host, or each one's
                    link = size * (1 if place == "host" else PER)
                bound_ms = link / goodput * 1e3
                print(f"| {coll} | {algo} | {place} | {byhost} | {size} | {t_us/1e3:.2f} | {row['out_of_place']['bus_bw']:.4f} | "
                      f"{bound_ms:.1f} | {100*bound_ms/(t_us/1e3):.0f}% |")
EOF
