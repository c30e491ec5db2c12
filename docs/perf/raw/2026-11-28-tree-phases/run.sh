#!/bin/bash
cd /work/main
for round in 1 2 3; do
  for sp in 1 0; do
    CHORUS_HOST_SPLIT_PHASES=$sp ITERS=5 MIN_BYTES=1M CONFIGS="Tree:1" timeout 900 perf/netns_ring_bench.sh build /tmp/split/r$round-s$sp 1gbit 64M all_reduce_perf > /tmp/split/r$round-s$sp.log 2>&1
  done
done
echo done > /tmp/split/done
