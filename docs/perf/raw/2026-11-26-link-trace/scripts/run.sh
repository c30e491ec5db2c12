#!/usr/bin/env bash
# One perf tool run over namespace hosts (H hosts x PER ranks, host placement, 1 Gbit/s HTB), with PERFCMD run in
# the middle of it (a sampler, perf record, nstat: pc.sh, pc2.sh). H=4 PER=2 (default) for the 4 x 2 runs, H=2 PER=1
# for the 2 x 1 runs (ALGO= for the default algorithm there). As root, from the repository root.
set -u
build=${BUILD:-build}; tool=${TOOL:-all_gather_perf}; algo=${ALGO-Hierarchical}
logs=${LOGS:-/tmp}
. scripts/netns_hosts.sh
export net=pf$$; H=${H:-4}; PER=${PER:-2}
netns_hosts "$net" $H 10.82.0 1gbit || exit 1
trap 'netns_hosts_del $net $H' EXIT
pids=()
for r in $(seq 0 $((H * PER - 1))); do h=$((r / PER + 1)); lr=$((r % PER))
  ip netns exec ${net}_h$h env RANK=$r WORLD_SIZE=$((H * PER)) LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$PER \
    MASTER_ADDR=10.82.0.1 MASTER_PORT=29911 NCCL_SOCKET_IFNAME==hx NCCL_ALGO=$algo CHORUS_TIMEOUT_S=120 \
    $build/perf/$tool -b ${SIZE:-16M} -e ${SIZE:-16M} -n ${N:-40} -w 2 > $logs/r$r.log 2>&1 &
  pids+=($!)
done
sleep 4
eval "${PERFCMD:-true}"
for p in "${pids[@]}"; do wait $p; done
grep -E '^ +[0-9]+ ' $logs/r0.log
