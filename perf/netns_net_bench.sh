#!/usr/bin/env bash
# The nets between hosts against the link and against Gloo and Open MPI (docs/perf/net.md, "Nets"): H network-
# namespace hosts on a bridge, ONE rank each (so every byte crosses a link), every link shaped with HTB to RATE both
# ways. Measures the link's TCP goodput with iperf3 (both directions at once, as a ring hop runs), then allreduce and
# allgather with chorus over NCCL_NET=Socket and NCCL_NET=UCX (UCX_TLS=tcp: namespaces share a kernel), Gloo
# (gloo_perf, TCP) and Open MPI (mpi_perf; mpirun starts one process in each namespace through an rsh agent, BTL tcp).
# Prints a Markdown table of busbw and of busbw / goodput: with one rank a host, a ring's busbw is what each link
# carries each way per second, so 100% is the link. A benchmark, not a test. Needs root, iperf3, python3, and for the
# baselines gloo_perf and mpi_perf built (libgloo-dev, libopenmpi-dev openmpi-bin).
#
# With PER ranks a host (PER > 1), rank r sits on host r / PER (PLACE=host, the default) or on host r % HOSTS
# (PLACE=cyclic, as srun --distribution=cyclic does). Ranks within a host then use each library's own path: chorus
# shared memory, Open MPI the vader BTL, Gloo TCP over the host's own address. The table sets each time against the
# bound the links impose: allreduce moves 2(H-1)/H x S through each host's link, allgather (H-1)/H x S_out (H
# hosts); with one rank a host that share is busbw / goodput.
#
# Usage: perf/netns_net_bench.sh BUILD_DIR OUT_DIR [RATE (1gbit)] [HOSTS (2)] [MAX_BYTES (256M)]
# Environment: MIN_BYTES (1M), FACTOR (4: each size is the one before times FACTOR), ITERS (5), LIBS (default
# "Socket UCX Gloo MPI"), PER (1), PLACE (host), MPI_ARGS (more mpirun arguments, e.g. "--mca mpi_yield_when_idle 1"),
# TCP_CC (cubic: the hosts' TCP congestion control, as in perf/netns_ring_bench.sh), PACKETS (1: print the TCP
# segments host 1 sent and received during each run, and per call, counting 2 x ITERS calls a size: run one size,
# MIN_BYTES = MAX_BYTES, with ITERS in the thousands so that warm-up and setup are lost in it), CPUS (a list of CPUs,
# "0 1 0 1": rank r's process runs on CPU r mod the list's length alone, for every library, so that a run's placement
# of ranks on cores is the same each time; unset, the kernel places them), COLLS (the collectives, default "allreduce
# allgather"; alltoall too, which Gloo's tool does not offer: its bound is allgather's, (H-1)/H of each rank's buffer
# through each host's link), NET_PLUGIN (an external NCCL net plugin, a path or a name as NCCL_NET_PLUGIN takes it:
# any other word in LIBS is then the NCCL_NET name of that plugin's net, "Libfabric" for aws-ofi-nccl; its own
# settings, FI_PROVIDER say, pass through the environment).
set -u
build=${1:?usage: netns_net_bench.sh BUILD_DIR OUT_DIR [RATE] [HOSTS] [MAX_BYTES]}
out=${2:?usage: netns_net_bench.sh BUILD_DIR OUT_DIR [RATE] [HOSTS] [MAX_BYTES]}
rate=${3:-1gbit}
H=${4:-2}
maxb=${5:-256M}
libs=${LIBS:-Socket UCX Gloo MPI}
P=${PER:-1}
place=${PLACE:-host}
n=$((H * P))
build=$(cd "$build" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/netns_hosts.sh"
net=nb$$
subnet=10.85.0
pids=()
agent=$(mktemp)
pin=$(mktemp)

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  netns_hosts_del "$net" "$H"
  rm -f "$agent" "$pin"
  rm -rf /tmp/gloo-store-nb$$-*
}
trap cleanup EXIT
trap 'exit 130' INT  # so that an interrupted or timed-out run (timeout sends TERM) still runs cleanup
trap 'exit 143' TERM

export NETNS_TCP_CC=${TCP_CC:-cubic}
netns_hosts "$net" "$H" $subnet "$rate" || exit 1

ip netns exec "${net}_h2" iperf3 -s -D -1 -p 5201 >/dev/null 2>&1
sleep 0.5
ip netns exec "${net}_h1" iperf3 -c $subnet.2 -p 5201 -t 5 --bidir -J >"$out/iperf3.json" 2>&1
goodput=$(python3 -c '
import json,sys
e=json.load(open(sys.argv[1]))["end"]
print(min(e["sum_sent"]["bits_per_second"], e["sum_sent_bidir_reverse"]["bits_per_second"])/8)
' "$out/iperf3.json") || { echo "iperf3 failed: $(tail -3 "$out/iperf3.json")"; exit 1; }
echo "link $rate, $H hosts x $P ranks (placed by $place): TCP goodput $(python3 -c "print(round($goodput/1e6,1))") MB/s each way (iperf3 --bidir, 5 s; TCP $NETNS_TCP_CC)"

# mpirun's rsh agent: host $subnet.i is namespace ${net}_hi, with a host name of its own (a UTS namespace), since
# Open MPI names its shared-memory segments by host name and local rank.
cat >"$agent" <<EOF
#!/bin/bash
host=\$1; shift
exec ip netns exec ${net}_h\${host##*.} unshare --uts bash -c "hostname ${net}-h\${host##*.}; \$*"
EOF
chmod +x "$agent"
# CPUS: each rank's process on its CPU (the rank from the launcher's environment: Open MPI's, or RANK).
cat >"$pin" <<'EOF'
#!/bin/bash
cpus=($CPUS)
r=${OMPI_COMM_WORLD_RANK:-$RANK}
exec taskset -c "${cpus[$((r % ${#cpus[@]}))]}" "$@"
EOF
chmod +x "$pin"
pinned() { if [ -n "${CPUS:-}" ]; then echo "$pin"; fi; }

port=29900
flags() { echo "-b ${MIN_BYTES:-1M} -e $maxb -f ${FACTOR:-4} -n ${ITERS:-5} -w 1"; }

# run LIB COLL: n ranks, JSON to $out/LIB-COLL.json.
run() {
  local lib=$1 coll=$2 r rc=0 tool
  port=$((port + 2))
  if [ "$lib" = MPI ]; then
    local hosts="" btl=tcp,self map=slot
    for r in $(seq 1 "$H"); do hosts="$hosts${hosts:+,}$subnet.$r:$P"; done
    if [ "$P" -gt 1 ]; then btl=vader,tcp,self; fi
    if [ "$place" = cyclic ]; then map=node; fi
    ip netns exec "${net}_h1" mpirun --allow-run-as-root --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
      ${MPI_ARGS:-} --mca btl $btl --mca btl_tcp_if_include hx --mca oob_tcp_if_include hx --host "$hosts" -np "$n" --map-by $map \
      -x MASTER_ADDR=$subnet.1 -x MASTER_PORT=$port -x CPUS="${CPUS:-}" \
      $(pinned) "$build/perf/mpi_perf" -op "$coll" $(flags) --json "$out/$lib-$coll.json" >"$out/$lib-$coll.log" 2>&1
    return $?
  fi
  case $coll in allreduce) tool=all_reduce_perf ;; allgather) tool=all_gather_perf ;; alltoall) tool=alltoall_perf ;; esac
  [ "$lib" = Gloo ] && tool="gloo_perf -op $coll"
  pids=()
  for r in $(seq 0 $((n - 1))); do
    local h=$((r / P + 1)) lr=$((r % P))
    if [ "$place" = cyclic ]; then h=$((r % H + 1)) lr=$((r / H)); fi
    ip netns exec "${net}_h$h" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$P \
      MASTER_ADDR=$subnet.1 MASTER_PORT=$port NCCL_SOCKET_IFNAME==hx NCCL_NET="$lib" NCCL_NET_PLUGIN="${NET_PLUGIN:-none}" \
      UCX_TLS=tcp UCX_NET_DEVICES=hx GLOO_SOCKET_IFNAME=hx GLOO_STORE_DIR=/tmp/gloo-store-nb$$-$port \
      CHORUS_TIMEOUT_S=300 CPUS="${CPUS:-}" $(pinned) $build/perf/$tool $(flags) --json "$out/$lib-$coll.json" >"$out/$lib-$coll.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  pids=()
  return $rc
}

# TCP segments host 1 has sent and received (OutSegs, InSegs of /proc/net/snmp in its namespace).
segs() { ip netns exec "${net}_h1" awk '/^Tcp:/ { getline; print $12, $11 }' /proc/net/snmp; }

# ran: the LIB-COLL pairs this run measures, in order; the table below lists those.
ran=
for coll in ${COLLS:-allreduce allgather}; do
  for lib in $libs; do
    if [ "$lib" = Gloo ] && [ "$coll" = alltoall ]; then continue; fi
    ran="$ran $lib-$coll"
    [ "${PACKETS:-0}" = 1 ] && before=$(segs)
    run "$lib" "$coll" || echo "$lib $coll failed (logs in $out)"
    if [ "${PACKETS:-0}" = 1 ]; then
      set -- $before $(segs)
      echo "$lib $coll: host 1 sent $(($3 - $1)) and received $(($4 - $2)) TCP segments;" \
        "$(python3 -c "print(f'{($3 - $1) / (2 * ${ITERS:-5}):.2f} and {($4 - $2) / (2 * ${ITERS:-5}):.2f}')") a call"
    fi
  done
done

python3 - "$out" "$goodput" "$ran" "$H" <<'EOF'
import json, os, sys
out, goodput, ran, H = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
name = {"Socket": "chorus, NCCL_NET=Socket", "UCX": "chorus, NCCL_NET=UCX", "Gloo": "Gloo (TCP)", "MPI": "Open MPI (BTL tcp; vader within a host)"}
print("\n| collective | library | size (bytes) | time (ms) | busbw (MB/s) | share of link bound | #wrong |")
print("|---|---|---|---|---|---|---|")
for pair in ran:
    lib, coll = pair.split("-", 1)
    name.setdefault(lib, f"chorus, NCCL_NET={lib} (a plugin)")
    path = f"{out}/{pair}.json"
    if not os.path.exists(path):
        print(f"| {coll} | {name[lib]} | - | failed | | | |")
        continue
    for row in json.load(open(path))["results"]:
        o = row["out_of_place"]
        bw = o["bus_bw"] * 1e9
        # bytes each host's link must carry each way; the size is allreduce's buffer, allgather's output,
        # alltoall's buffer a rank
        link = (2 if coll == "allreduce" else 1) * (H - 1) / H * row["size"]
        share = link / goodput / (o["time"] / 1e6)
        print(f"| {coll} | {name[lib]} | {row['size']} | {o['time']/1e3:.3f} | {bw/1e6:.1f} | "
              f"{100*share:.0f}% | {o.get('wrong', 0)} |")
EOF
