#!/bin/bash
# Samples ss -tin in every namespace host during a bench run.
cd /work/main
for cfg in Tree ring; do
  out=/tmp/ss/$cfg; mkdir -p $out/ss
  ( while true; do
      t=$(date +%s.%N)
      for ns in $(ip netns list | awk '/^rb[0-9]+_h[0-9]/{print $1}'); do
        ip netns exec $ns ss -tinH state established > $out/ss/$ns-$t.txt 2>/dev/null
      done
      sleep 2
    done ) &
  sp=$!
  ITERS=20 MIN_BYTES=64M CONFIGS="$cfg:1" timeout 900 perf/netns_ring_bench.sh build $out/bench 1gbit 64M all_reduce_perf > $out/bench.log 2>&1
  kill $sp
done
echo done > /tmp/ss/done
