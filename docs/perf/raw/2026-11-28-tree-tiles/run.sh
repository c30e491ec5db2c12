#!/bin/bash
# Tree allreduce forced, host by host and round-robin, 256 KB - 64 MB, cubic, CHORUS_TREE_TILES_PER_LEVEL 0 / 8 / 4
# alternated, three rounds.
cd /work/main
for round in 1 2 3; do
  for per in 0 8 4; do
    CHORUS_TREE_TILES_PER_LEVEL=$per TCP_CC=cubic ITERS=5 MIN_BYTES=256K FACTOR=2 CONFIGS="Tree:1" \
      perf/netns_ring_bench.sh build /tmp/bench/tree-tiles/r$round-per$per 1gbit 64M all_reduce_perf \
      > /tmp/bench/tree-tiles/r$round-per$per.log 2>&1
  done
done
date > /tmp/bench/tree-tiles/done
