#!/bin/bash
# Two rounds, in turn, for each net: sends and receives a part a NIC (default) and whole on one channel
# (NCCL_NCHANNELS_PER_NET_PEER=1), 256 KB - 16 MB.
cd "$(dirname "$0")/../../../.."
o=docs/perf/raw/2026-12-02-p2p-nics-ucx
for round in 1 2; do
  for net in UCX Socket; do
    for cfg in split one; do
      d=$o/$net-$cfg-r$round
      rm -rf $d; mkdir -p $d
      if [ $cfg = one ]; then export NCCL_NCHANNELS_PER_NET_PEER=1; else unset NCCL_NCHANNELS_PER_NET_PEER; fi
      if [ $net = UCX ]; then export NCCL_NET=UCX UCX_TLS=tcp; else unset NCCL_NET UCX_TLS; fi
      RAILS=2 ITERS=5 MIN_BYTES=256K CONFIGS="default:1" timeout 900 bash perf/netns_ring_bench.sh build-dev $d 500mbit 16M sendrecv_perf > $d/table.md 2>&1
      echo "$net $cfg r$round rc=$?"
    done
  done
done
