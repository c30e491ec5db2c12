cd /work/main
for r in 1 2 3; do
  LIBS="Socket UCX MPI" PER=2 MPI_ARGS="--mca mpi_yield_when_idle 1" MIN_BYTES=8 FACTOR=4 ITERS=200 perf/netns_net_bench.sh /work/bench-build /tmp/big/s42-$r 1gbit 4 32K > /tmp/big/s42-$r.txt 2>&1
done
echo done > /tmp/big/DONES42
