#!/bin/bash
# Allgather and reduce-scatter across 4 hosts x 2 ranks at 8-128 KB: rail, hierarchical, (allgather) recursive
# doubling and the tuner's choice forced in turn, cubic, three rounds, the order reversed every other round.
cd /work/main
while [ ! -f /tmp/bench/ar64/done ]; do sleep 5; done
for round in 1 2 3; do
  if [ $((round % 2)) = 1 ]; then ag="Rail:1 Hierarchical:1 RecDoubling:1 default:1"; rs="Rail:1 Hierarchical:1 default:1"
  else ag="default:1 RecDoubling:1 Hierarchical:1 Rail:1"; rs="default:1 Hierarchical:1 Rail:1"; fi
  TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="$ag" \
    perf/netns_ring_bench.sh build /tmp/bench/agrs64/r$round 1gbit 128K all_gather_perf > /tmp/bench/agrs64/r$round-ag.log 2>&1
  TCP_CC=cubic ITERS=40 MIN_BYTES=8K FACTOR=2 CONFIGS="$rs" \
    perf/netns_ring_bench.sh build /tmp/bench/agrs64/r$round 1gbit 128K reduce_scatter_perf > /tmp/bench/agrs64/r$round-rs.log 2>&1
done
date > /tmp/bench/agrs64/done
