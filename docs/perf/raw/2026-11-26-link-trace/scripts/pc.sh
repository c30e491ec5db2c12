# PERFCMD for run.sh: host 1's link counters every 2 ms for 3 s (sample.py) and, at the same time, perf probe marks
# at each ncclAllGather's entry and return. The probes are made first:
#   perf probe -x build/libnccl.so.2.28.9 ncclAllGather; perf probe -x build/libnccl.so.2.28.9 'ncclAllGather%return'
d=$(dirname "$0")
ip netns exec ${net}_h1 python3 $d/sample.py 3 ${LOGS:-/tmp}/s3.txt &
perf record -k CLOCK_MONOTONIC -e 'probe_libnccl:*' -a -o ${LOGS:-/tmp}/p3.data -- sleep 3 2>/dev/null
wait
