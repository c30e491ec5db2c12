# 4 hosts x 2 ranks, 1 Gbit/s: FIFO slots 8 (the old default) against the new default (16 across hosts), alternated.
cd "$(dirname "$0")/../../../.." && OUT=${OUT:-/tmp/fifo-slots-4x2} && mkdir -p "$OUT"
for r in 1 2 3; do for s in 8 default; do
  if [ $s = 8 ]; then export CHORUS_FIFO_SLOTS=8; else unset CHORUS_FIFO_SLOTS; fi
  ITERS=5 MIN_BYTES=1M CONFIGS="default:1 ring:1" perf/netns_ring_bench.sh build "$OUT"/r$r-$s 1gbit 64M "all_reduce_perf all_gather_perf" > "$OUT"/r$r-$s.log 2>&1
done; done
