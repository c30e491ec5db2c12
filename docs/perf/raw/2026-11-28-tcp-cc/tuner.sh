#!/bin/bash
cd /work/main
TCP_CC=cubic ITERS=20 MIN_BYTES=64K FACTOR=2 CONFIGS="default:1 ring:1 Hierarchical:1 Rail:1" timeout 1200 perf/netns_ring_bench.sh build /tmp/cc/tuner-cubic 1gbit 4M > /tmp/cc/tuner-cubic.log 2>&1
echo done > /tmp/cc/tuner.done
