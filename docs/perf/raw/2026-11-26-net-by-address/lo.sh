# Loopback A/B: 2 ranks on this host, socket net forced (NCCL_SHM_DISABLE=1), no shaping: CPU-bound.
B=${BUILD:-build}
for round in 1 2 3; do for v in 0 1; do
  for t in all_reduce_perf all_gather_perf; do
    echo "== r$round v$v $t large"
    CHORUS_NET_SEND_BY_ADDRESS=$v NCCL_SHM_DISABLE=1 $B/perf/chorusrun -n 2 $B/perf/$t -b 4M -e 64M -f 4 -n 20 -w 3 2>&1 | grep -E '^ +[0-9]+ '
    echo "== r$round v$v $t small"
    CHORUS_NET_SEND_BY_ADDRESS=$v NCCL_SHM_DISABLE=1 $B/perf/chorusrun -n 2 $B/perf/$t -b 8 -e 1M -f 8 -n 200 -w 20 2>&1 | grep -E '^ +[0-9]+ '
  done
done; done
