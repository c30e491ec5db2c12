cd /work/main
for r in 1 2; do
 for v in default tw0 da0; do
  unset CHORUS_SOCKET_TWO_WAY CHORUS_SOCKET_DELAYED_ACKS
  [ $v = tw0 ] && export CHORUS_SOCKET_TWO_WAY=0
  [ $v = da0 ] && export CHORUS_SOCKET_DELAYED_ACKS=0
  COLLS=allgather LIBS="Socket" MIN_BYTES=16M ITERS=10 perf/netns_net_bench.sh /work/bench-build /tmp/big/ag-$v-$r 10gbit 2 64M > /tmp/big/ag-$v-$r.txt 2>&1
 done
done
echo done > /tmp/big/DONEAG
