#!/usr/bin/env bash
# A/B: CHORUS_NET_SEND_BY_ADDRESS=0/1, same build, alternated.
# As root, from the repository root; results under OUT (default .). The small-size and 1 Gbit/s runs' tables are
# kept here; the "small-*" runs are summarised in docs/perf/net.md only through lo.sh.
B=${BUILD:-build}; P=perf; O=${OUT:-.}
for round in 1 2 3; do
  for v in 0 1; do
    CHORUS_NET_SEND_BY_ADDRESS=$v LIBS=Socket MIN_BYTES=4M ITERS=20 $P/netns_net_bench.sh $B $O/10g-r$round-v$v 10gbit 2 64M > $O/10g-r$round-v$v.log 2>&1
  done
done
for round in 1 2; do
  for v in 0 1; do
    CHORUS_NET_SEND_BY_ADDRESS=$v LIBS=Socket MIN_BYTES=8 ITERS=100 $P/netns_net_bench.sh $B $O/small-r$round-v$v 10gbit 2 1M > $O/small-r$round-v$v.log 2>&1
  done
done
for round in 1 2; do
  for v in 0 1; do
    CHORUS_NET_SEND_BY_ADDRESS=$v LIBS=Socket MIN_BYTES=4M ITERS=10 $P/netns_net_bench.sh $B $O/1g-r$round-v$v 1gbit 2 64M > $O/1g-r$round-v$v.log 2>&1
  done
done
echo finished
