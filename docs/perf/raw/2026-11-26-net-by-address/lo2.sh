# Loopback A/B, 8 rounds at 16 and 64 MB: 2 ranks, socket net forced (NCCL_SHM_DISABLE=1). From the repository root.
B=${BUILD:-build}
for round in $(seq 1 8); do for v in 0 1; do for t in all_reduce_perf all_gather_perf; do
  r=$(CHORUS_NET_SEND_BY_ADDRESS=$v NCCL_SHM_DISABLE=1 $B/perf/chorusrun -n 2 $B/perf/$t -b 16M -e 64M -f 4 -n 10 -w 2 2>&1 | grep -E '^ +[0-9]+ ' | awk '{printf "%s:%s/%s ", $1, $6, $10}')
  echo "$round $v $t $r"
done; done; done
