ip netns exec ${net}_h1 python3 /tmp/prof/sample.py 3 /tmp/prof/s3.txt &
perf record -k CLOCK_MONOTONIC -e 'probe_libnccl:*' -a -o /tmp/prof/p3.data -- sleep 3 2>/dev/null
wait
