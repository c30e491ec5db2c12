#!/usr/bin/env bash
# A/B: CHORUS_NET_SEND_BY_ADDRESS=0/1, same build, alternated.
B=${BUILD:-build}; P=perf
cd "${OUT:-.}"  # run from the repository root with OUT set
for round in 1 2 3; do
  for v in 0 1; do
    CHORUS_NET_SEND_BY_ADDRESS=$v LIBS=Socket MIN_BYTES=4M ITERS=20 $P/netns_net_bench.sh $B 10g-r$round-v$v 10gbit 2 64M > 10g-r$round-v$v.log 2>&1
  done
done
for round in 1 2; do
  for v in 0 1; do
    CHORUS_NET_SEND_BY_ADDRESS=$v LIBS=Socket MIN_BYTES=8 ITERS=100 $P/netns_net_bench.sh $B small-r$round-v$v 10gbit 2 1M > small-r$round-v$v.log 2>&1
  done
done
for round in 1 2; do
  for v in 0 1; do
    CHORUS_NET_SEND_BY_ADDRESS=$v LIBS=Socket MIN_BYTES=4M ITERS=10 $P/netns_net_bench.sh $B 1g-r$round-v$v 1gbit 2 64M > 1g-r$round-v$v.log 2>&1
  done
done
echo finished
