cd /work/main
for lib in UCX Socket; do
  CPUS="0 1 0 1" LIBS=$lib MIN_BYTES=8 ITERS=200000 COLLS=allreduce perf/netns_net_bench.sh /work/bench-build /tmp/big/tr-$lib 1gbit 4 8 > /tmp/big/tr-$lib.txt 2>&1 &
  bp=$!
  for i in $(seq 60); do sleep 1; pgrep -f all_reduce_perf >/dev/null && break; done
  sleep 12
  timeout 20 perf trace -s -a -o /tmp/big/trace-$lib.txt -- sleep 3 > /dev/null 2>&1
  pkill -f all_reduce_perf
  wait $bp
done
echo done > /tmp/big/DONETR
