#!/bin/bash
cd /work/main
for r in 1 2; do
  TCP_CC=cubic ITERS=20 MIN_BYTES=256K FACTOR=2 CONFIGS="ring:1 Hierarchical:1" timeout 900 perf/netns_ring_bench.sh build /tmp/cc/band-r$r 1gbit 2M "all_reduce_perf all_gather_perf" > /tmp/cc/band-r$r.log 2>&1
done
echo done > /tmp/cc/band.done
