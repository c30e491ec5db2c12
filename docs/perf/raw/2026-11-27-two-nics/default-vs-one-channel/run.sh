#!/bin/bash
# Two NICs a host (2 x 500 Mbit/s): the default (a channel a NIC) against CHORUS_HOST_NCHANNELS=1, 4 KB - 16 MB.
cd /work/main
for round in 1 2; do
for ch in auto 1; do
  if [ $ch = auto ]; then unset CHORUS_HOST_NCHANNELS; else export CHORUS_HOST_NCHANNELS=$ch; fi
  RAILS=2 ITERS=10 MIN_BYTES=4K CONFIGS="default:1" perf/netns_ring_bench.sh build /tmp/ab2/r$round-ch$ch 500mbit 16M "all_reduce_perf all_gather_perf" > /tmp/ab2/r$round-ch$ch.txt 2>&1
done
done
echo done > /tmp/ab2/DONE
