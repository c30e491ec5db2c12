#!/usr/bin/env bash
# iperf3 on one link, then on all 4 links of a host-order ring at once (h_i -> h_{i+1}, --bidir), 1 Gbit HTB.
set -u
. /work/main/scripts/netns_hosts.sh
net=ri$$; H=4
trap 'netns_hosts_del $net $H' EXIT
netns_hosts $net $H 10.82.0 ${RATE:-1gbit} || exit 1
for i in 1 2 3 4; do ip netns exec ${net}_h$i iperf3 -s -D -p 5201 >/dev/null 2>&1; done
sleep 0.5
one() { ip netns exec ${net}_h1 iperf3 -c 10.82.0.2 -p 5201 -t 5 --bidir -J > $1; }
ring() { for i in 1 2 3 4; do j=$(( i % 4 + 1 )); ip netns exec ${net}_h$i iperf3 -c 10.82.0.$j -p 5201 -t 5 --bidir -J > $1.$i & done; wait; }
gp() { python3 -c '
import json,sys
for f in sys.argv[1:]:
  d=json.load(open(f))["end"]; print(f.rsplit("/",1)[-1], round(d["sum_sent"]["bits_per_second"]/8e6,1), round(d["sum_sent_bidir_reverse"]["bits_per_second"]/8e6,1))' "$@"; }
cpu() { awk "/^cpu /{print \$2+\$3+\$4+\$6+\$7+\$8, \$5}" /proc/stat; }
for r in 1 2; do
  one /tmp/ring-iperf/one$r.json; gp /tmp/ring-iperf/one$r.json
  a=$(cpu); ring /tmp/ring-iperf/ring$r.json; b=$(cpu); echo "cpu busy,idle jiffies before $a after $b"; gp /tmp/ring-iperf/ring$r.json.*
done
pkill -f 'iperf3 -s -D -p 5201'
