#!/bin/bash
cd /work/main
for round in 1 2; do
RAILS=2 CHORUS_HOST_NCHANNELS=2 ITERS=5 MIN_BYTES=1M CONFIGS="ring:1 default:1" perf/netns_ring_bench.sh build /tmp/rails/r$round-2rails-500m-ch2 500mbit 16M "all_reduce_perf all_gather_perf" > /tmp/rails/r$round-2rails-500m-ch2.txt 2>&1
RAILS=2 CHORUS_HOST_NCHANNELS=1 ITERS=5 MIN_BYTES=1M CONFIGS="ring:1 default:1" perf/netns_ring_bench.sh build /tmp/rails/r$round-2rails-500m-ch1 500mbit 16M "all_reduce_perf all_gather_perf" > /tmp/rails/r$round-2rails-500m-ch1.txt 2>&1
RAILS=1 CHORUS_HOST_NCHANNELS=2 ITERS=5 MIN_BYTES=1M CONFIGS="ring:1 default:1" perf/netns_ring_bench.sh build /tmp/rails/r$round-1rail-1g-ch2 1gbit 16M "all_reduce_perf all_gather_perf" > /tmp/rails/r$round-1rail-1g-ch2.txt 2>&1
done
echo done > /tmp/rails/DONE
