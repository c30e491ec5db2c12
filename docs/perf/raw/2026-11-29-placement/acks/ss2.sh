#!/bin/bash
# ss2.sh LIB PROCESS_NAME "CPUS" OUT: one run of 60,000 8 B allreduces over 4 namespace hosts x 1 rank, rank r's
# process on CPU r of CPUS; `ss -tin` in host 1 2.5 s after the 4 processes appear and again 1 s later (OUT.ss-a,
# OUT.ss-b); ssd.py OUT.ss-a OUT.ss-b prints each busy connection's segments in that second. Run from the source tree
# as root, BUILD the build folder (default build).
L=$1; P=$2; C=$3; o=$4
(CPUS="$C" LIBS=$L MPI_ARGS="--mca mpi_yield_when_idle 1" MIN_BYTES=8 ITERS=60000 timeout 300 \
  perf/netns_net_bench.sh ${BUILD:-build} $o 1gbit 4 8 > $o.txt 2>&1 &)
for t in $(seq 400); do
  ns=$(ip netns list | grep -o 'nb[0-9]*_h1' | head -1)
  [ -n "$ns" ] && n=$(pgrep -x $P | wc -l) && [ "$n" -ge 4 ] && break
  sleep 0.05
done
sleep 2.5
ip netns exec $ns ss -tin > $o.ss-a; sleep 1; ip netns exec $ns ss -tin > $o.ss-b
while pgrep -f netns_net_bench >/dev/null; do sleep 0.5; done
