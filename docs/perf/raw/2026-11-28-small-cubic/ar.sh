#!/bin/bash
# Allreduce across 4 hosts x 2 ranks at 8-128 KB: the tree, hierarchical, recursive doubling and the tuner's choice
# forced in turn, cubic, three rounds, the order of the algorithms reversed every other round.
cd /work/main
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then cfg="Tree:1 Hierarchical:1 RecDoubling:1 default:1"; else cfg="default:1 RecDoubling:1 Hierarchical:1 Tree:1"; fi
  TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="$cfg" \
    perf/netns_ring_bench.sh build /tmp/bench/ar64/r$round 1gbit 128K all_reduce_perf > /tmp/bench/ar64/r$round.log 2>&1
done
date > /tmp/bench/ar64/done
