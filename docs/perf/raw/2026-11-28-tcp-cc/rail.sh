#!/bin/bash
cd /work/main
for r in 1 2; do
  TCP_CC=cubic ITERS=40 MIN_BYTES=32K FACTOR=2 CONFIGS="Rail:1 Hierarchical:1" timeout 900 perf/netns_ring_bench.sh build /tmp/cc/rail-r$r 1gbit 256K "all_gather_perf reduce_scatter_perf" > /tmp/cc/rail-r$r.log 2>&1
done
echo done > /tmp/cc/rail.done
