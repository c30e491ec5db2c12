#!/bin/bash
cd /work/main
B=/tmp/bb
O=/tmp/tb
for rep in 1 2; do
for sbs in 0 1; do
  export CHORUS_HOST_SIDE_BY_SIDE=$sbs
  NCCL_ALGO=Tree LIBS=Socket PER=1 MIN_BYTES=4M ITERS=5 timeout 600 perf/netns_net_bench.sh $B $O/2x1-sbs$sbs-r$rep 1gbit 2 16M > $O/2x1-sbs$sbs-r$rep.log 2>&1
  ITERS=5 MIN_BYTES=1M CONFIGS="Tree:1" timeout 900 perf/netns_ring_bench.sh $B $O/4x2-sbs$sbs-r$rep 1gbit 16M all_reduce_perf > $O/4x2-sbs$sbs-r$rep.log 2>&1
done
done
echo ALLDONE > $O/done
