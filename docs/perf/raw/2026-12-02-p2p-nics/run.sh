#!/bin/bash
# Two rounds, in turn: sends and receives a part a NIC (default) and whole on one channel (NCCL_NCHANNELS_PER_NET_PEER=1).
cd /work/main
o=docs/perf/raw/2026-12-02-p2p-nics
for round in 1 2; do
  for cfg in split one; do
    d=$o/$cfg-r$round
    rm -rf $d; mkdir -p $d
    if [ $cfg = one ]; then export NCCL_NCHANNELS_PER_NET_PEER=1; else unset NCCL_NCHANNELS_PER_NET_PEER; fi
    RAILS=2 ITERS=5 MIN_BYTES=1M CONFIGS="default:1" timeout 900 bash perf/netns_ring_bench.sh build-dev $d 500mbit 64M sendrecv_perf > $d/table.md 2>&1
    echo "$cfg r$round rc=$?"
  done
done
