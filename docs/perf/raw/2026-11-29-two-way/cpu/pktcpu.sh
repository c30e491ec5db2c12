#!/usr/bin/env bash
# packets per call on host 1: chorus Socket vs Open MPI, 4 hosts x 1 rank, 8 B allreduce
set -u
build=/work/main/build; H=${H:-4}; N=${N:-20000}; SIZE=${SIZE:-8}; COLL=${COLL:-allreduce}
. /work/main/scripts/netns_hosts.sh
net=pk$$; subnet=10.86.0; agent=$(mktemp)
cleanup(){ netns_hosts_del "$net" "$H"; rm -f "$agent"; }
trap cleanup EXIT
export NETNS_TCP_CC=cubic
netns_hosts "$net" "$H" $subnet 1gbit || exit 1
cat >"$agent" <<EOA
#!/bin/bash
host=\$1; shift
exec ip netns exec ${net}_h\${host##*.} unshare --uts bash -c "hostname ${net}-h\${host##*.}; \$*"
EOA
chmod +x "$agent"
snap(){ ip netns exec ${net}_h1 awk '/^Tcp:/{getline; print "tcp", $11, $12}' /proc/net/snmp; ip netns exec ${net}_h1 awk '/hx:/{print "dev", $3, $11}' /proc/net/dev; }
port=29950
for lib in ${LIBS:-Socket MPI}; do
  port=$((port+2))
  a=$(snap); t0=$(date +%s.%N)
  if [ $lib = MPI ]; then
    hosts=""; for r in $(seq 1 $H); do hosts="$hosts${hosts:+,}$subnet.$r:1"; done
    ip netns exec ${net}_h1 mpirun --allow-run-as-root --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
      --mca mpi_yield_when_idle 1 --mca btl tcp,self --mca btl_tcp_if_include hx --mca oob_tcp_if_include hx --host "$hosts" -np $H -x MASTER_ADDR=$subnet.1 -x MASTER_PORT=$port \
      /tmp/pkt/mpiwrap.sh $build/perf/mpi_perf -op $COLL -b $SIZE -e $SIZE -n $N -w 10 > /tmp/pkt/$lib.log 2>&1
  else
    [ $COLL = allreduce ] && tool=all_reduce_perf || tool=all_gather_perf
    pids=()
    for r in $(seq 0 $((H-1))); do
      ip netns exec ${net}_h$((r+1)) env RANK=$r WORLD_SIZE=$H LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=$subnet.1 MASTER_PORT=$port \
        NCCL_SOCKET_IFNAME==hx NCCL_NET=$lib NCCL_NET_PLUGIN=none UCX_TLS=tcp UCX_NET_DEVICES=hx ${EXTRA:-} \
        perf stat -x, -e task-clock,context-switches -o /tmp/pkt/ps-$lib-$r.txt $build/perf/$tool -b $SIZE -e $SIZE -n $N -w 10 > /tmp/pkt/$lib.$r.log 2>&1 & pids+=($!)
    done
    for p in "${pids[@]}"; do wait $p; done
  fi
  t1=$(date +%s.%N); b=$(snap)
  echo "== $lib $COLL $SIZE x $N: $(echo "$t1 - $t0" | bc) s"
  paste <(echo "$a") <(echo "$b") | awk -v n=$N '{printf "%s in %.2f out %.2f per call\n", $1, ($5-$2)/n, ($6-$3)/n}'
done
