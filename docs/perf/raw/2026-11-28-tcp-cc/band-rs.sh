#!/bin/bash
cd /work/main
while [ ! -f /tmp/cc/band3.done ]; do sleep 3; done
for r in 4 5; do
  TCP_CC=cubic ITERS=20 MIN_BYTES=256K FACTOR=2 CONFIGS="ring:1 Hierarchical:1" timeout 900 perf/netns_ring_bench.sh build /tmp/cc/band-rs$r 1gbit 2M "reduce_scatter_perf" > /tmp/cc/band-rs$r.log 2>&1
done
echo done > /tmp/cc/band4.done
