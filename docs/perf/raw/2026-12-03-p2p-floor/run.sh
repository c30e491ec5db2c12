#!/bin/bash
# Two rounds, in turn, 16 KB - 512 KB: every send or receive between hosts cut into a part a NIC
# (CHORUS_NIC_CHANNELS_MIN_BYTES=1) and each one whole on channel 0 (NCCL_NCHANNELS_PER_NET_PEER=1).
cd /work/main
o=docs/perf/raw/2026-12-03-p2p-floor
for round in 1 2; do
  for cfg in split one; do
    d=$o/$cfg-r$round
    rm -rf $d; mkdir -p $d
    unset NCCL_NCHANNELS_PER_NET_PEER CHORUS_NIC_CHANNELS_MIN_BYTES
    if [ $cfg = one ]; then export NCCL_NCHANNELS_PER_NET_PEER=1; else export CHORUS_NIC_CHANNELS_MIN_BYTES=1; fi
    RAILS=2 ITERS=20 MIN_BYTES=16K FACTOR=2 CONFIGS="default:1" timeout 900 bash perf/netns_ring_bench.sh build-dev $d 500mbit 512K sendrecv_perf > $d/table.md 2>&1
    echo "$cfg r$round rc=$?"
  done
done
