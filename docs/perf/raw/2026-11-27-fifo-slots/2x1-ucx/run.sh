# 2 hosts x 1 rank, 1 Gbit/s, Socket and UCX: FIFO slots 8 (the old default) against the new default (16), alternated.
cd "$(dirname "$0")/../../../.." && OUT=${OUT:-/tmp/fifo-slots-2x1} && mkdir -p "$OUT"
for r in 1 2; do for s in 8 default; do
  if [ $s = 8 ]; then export CHORUS_FIFO_SLOTS=8; else unset CHORUS_FIFO_SLOTS; fi
  LIBS="Socket UCX" MIN_BYTES=16M ITERS=10 perf/netns_net_bench.sh build "$OUT"/r$r-$s 1gbit 2 64M > "$OUT"/r$r-$s.log 2>&1
done; done
