#!/bin/bash
cd /work/main
for round in 1 2; do
  for cc in cubic bbr; do
    HOST_SYSCTL="net.ipv4.tcp_congestion_control=$cc" ITERS=5 MIN_BYTES=4M CONFIGS="Tree:1 ring:1 Hierarchical:1 default:1" \
      timeout 1200 perf/netns_ring_bench.sh build /tmp/cc/r$round-$cc 1gbit 64M "all_reduce_perf all_gather_perf" > /tmp/cc/r$round-$cc.log 2>&1
  done
done
echo done > /tmp/cc/done
