#!/bin/bash
# The tuner's choice over 8-32 KB (the tree only) against 8-128 KB (hierarchical too, from 64 KB), alternated.
cd /work/main
for i in 1 2 3; do
  for max in 32K 128K; do
    TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="default:1" perf/netns_ring_bench.sh build /tmp/bench/conn/r$i-$max 1gbit $max all_reduce_perf > /tmp/bench/conn/r$i-$max.log 2>&1
  done
done
date > /tmp/bench/conn/done
