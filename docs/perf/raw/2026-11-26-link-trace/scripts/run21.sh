#!/usr/bin/env bash
# one config under perf: 4 hosts x 2 ranks, host placement
set -u
build=/tmp/bb-ch; tool=${TOOL:-all_gather_perf}; algo=${ALGO:-Hierarchical}
. /work/main/scripts/netns_hosts.sh
net=pg$$; H=${H:-2}; PER=${PER:-1}
netns_hosts "$net" $H 10.83.0 1gbit || exit 1
trap 'netns_hosts_del $net $H' EXIT
pids=()
for r in $(seq 0 $((H*PER-1))); do h=$((r / PER + 1)); lr=$((r % PER))
  ip netns exec ${net}_h$h env RANK=$r WORLD_SIZE=$((H*PER)) LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$PER MASTER_ADDR=10.83.0.1 MASTER_PORT=29911 \
   NCCL_SOCKET_IFNAME==hx NCCL_ALGO=$algo CHORUS_TIMEOUT_S=120 $build/perf/$tool -b ${SIZE:-16M} -e ${SIZE:-16M} -n ${N:-40} -w 2 > /tmp/prof/r$r.log 2>&1 &
  pids+=($!)
done
sleep 4
${PERFCMD:-perf record -a -g -o /tmp/prof/perf.data -- sleep 8} 
for p in "${pids[@]}"; do wait $p; done
grep -A3 'size' /tmp/prof/r0.log | tail -3
