#!/bin/bash
cd /work/main
for i in 1 2 3; do
  for cfg in default:1 Tree:1; do
    TCP_CC=cubic ITERS=200 MIN_BYTES=32K FACTOR=2 CONFIGS="$cfg" perf/netns_ring_bench.sh build /tmp/bench/t32/r$i-${cfg%%:*} 1gbit 32K all_reduce_perf > /tmp/bench/t32/r$i-${cfg%%:*}.log 2>&1
  done
done
date > /tmp/bench/t32/done
