#!/bin/bash
# The default after the change (a part a NIC from 64 KB, each part at least 32 KB) against each one whole on channel 0
# (NCCL_NCHANNELS_PER_NET_PEER=1), 16 KB - 512 KB, over the socket net and the UCX net, one round each.
cd "$(dirname "$0")/../../../.."
o=docs/perf/raw/2026-12-03-p2p-floor
for net in Socket UCX; do
  for cfg in default one; do
    d=$o/after-$net-$cfg
    rm -rf $d; mkdir -p $d
    unset NCCL_NCHANNELS_PER_NET_PEER CHORUS_NIC_CHANNELS_MIN_BYTES
    if [ $cfg = one ]; then export NCCL_NCHANNELS_PER_NET_PEER=1; fi
    if [ $net = UCX ]; then export NCCL_NET=UCX UCX_TLS=tcp; else unset NCCL_NET UCX_TLS; fi
    RAILS=2 ITERS=20 MIN_BYTES=16K FACTOR=2 CONFIGS="default:1" timeout 900 bash perf/netns_ring_bench.sh build-dev $d 500mbit 512K sendrecv_perf > $d/table.md 2>&1
    echo "$net $cfg rc=$?"
  done
done
