cd /work/main
for r in 1 2 3; do
 for v in 1 2; do
  unset CHORUS_HOST_NCHANNELS
  [ $v = 2 ] && export CHORUS_HOST_NCHANNELS=2
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING ITERS=20 MIN_BYTES=1M FACTOR=2 CONFIGS="default:1" perf/netns_ring_bench.sh /work/bench-build /tmp/big/nch$v-$r 1gbit 4M "all_reduce_perf all_gather_perf" > /tmp/big/nch$v-$r.txt 2>&1
 done
done
echo done > /tmp/big/DONENCH
