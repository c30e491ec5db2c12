cd /work/main
for r in 1 2 3; do
 for v in default da0; do
  unset CHORUS_SOCKET_DELAYED_ACKS
  [ $v = da0 ] && export CHORUS_SOCKET_DELAYED_ACKS=0
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING COLLS=allreduce LIBS="Socket UCX" PER=2 MIN_BYTES=2K FACTOR=2 ITERS=200 perf/netns_net_bench.sh /work/bench-build /tmp/big/mid-$v-$r 1gbit 4 32K > /tmp/big/mid-$v-$r.txt 2>&1
 done
done
echo done > /tmp/big/DONEMID
