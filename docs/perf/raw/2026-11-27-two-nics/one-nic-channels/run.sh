#!/bin/bash
cd /work/main
for round in 1 2; do
for ch in 1 2; do
CHORUS_HOST_NCHANNELS=$ch ITERS=10 MIN_BYTES=4K CONFIGS="default:1" perf/netns_ring_bench.sh build /tmp/ab/r$round-ch$ch 1gbit 16M "all_reduce_perf all_gather_perf" > /tmp/ab/r$round-ch$ch.txt 2>&1
done
done
echo done > /tmp/ab/DONE
