#!/bin/bash
# After the tuner change: the tuner's choice and the forced algorithms at 8-128 KB, two rounds, cubic.
cd /work/main
for round in 1 2; do
  TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="default:1 Tree:1 Hierarchical:1 RecDoubling:1" \
    perf/netns_ring_bench.sh build /tmp/bench/small-new/r$round 1gbit 128K all_reduce_perf > /tmp/bench/small-new/r$round-ar.log 2>&1
  TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="default:1 Rail:1 Hierarchical:1 RecDoubling:1" \
    perf/netns_ring_bench.sh build /tmp/bench/small-new/r$round 1gbit 128K all_gather_perf > /tmp/bench/small-new/r$round-ag.log 2>&1
  TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="default:1 Rail:1 Hierarchical:1" \
    perf/netns_ring_bench.sh build /tmp/bench/small-new/r$round 1gbit 128K reduce_scatter_perf > /tmp/bench/small-new/r$round-rs.log 2>&1
done
date > /tmp/bench/small-new/done
