#!/bin/bash
cd /work/main
B=/tmp/bb
O=/tmp/sp
for rep in 1 2; do
for sp in 2000 100; do
  CHORUS_SPIN_ITERS=$sp ITERS=5 MIN_BYTES=1M CONFIGS="default:1" timeout 900 perf/netns_ring_bench.sh $B $O/4x2-spin$sp-r$rep 1gbit 16M "all_reduce_perf all_gather_perf" > $O/4x2-spin$sp-r$rep.log 2>&1
done
done
echo ALLDONE > $O/done
