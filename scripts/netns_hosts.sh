# Sourced by scripts that play several hosts with network namespaces (tests/tools/doctor_netns_test.sh,
# perf/netns_ring_bench.sh). Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN).
#
#   netns_hosts PREFIX N SUBNET RATE: namespaces ${PREFIX}_h1 .. ${PREFIX}_hN, each with one interface "hx" at
#     SUBNET.i/24, joined by a bridge in namespace ${PREFIX}_sw; every link shaped with HTB to RATE both ways (egress
#     of hx and of the bridge port). Returns 1 on the first failure.
#   netns_reshape PREFIX I RATE: changes host I's link rate, both ways.
#   netns_hosts_del PREFIX N: deletes them (the veth pairs go with their namespaces).

# ip netns add NAME, tried again a few times: namespaces made at the same moment by another process (another test
# of the suite, say) can race on the shared mount of /run/netns, and one of them then fails once.
netns_add() {
  local try
  for try in 1 2 3 4 5; do
    ip netns add "$1" 2>/dev/null && return 0
    ip netns del "$1" 2>/dev/null
    sleep 0.2
  done
  ip netns add "$1"
}

netns_shape() {  # NS DEV RATE
  ip netns exec "$1" tc qdisc add dev "$2" root handle 1: htb default 10 r2q 1000 || return 1
  ip netns exec "$1" tc class add dev "$2" parent 1: classid 1:10 htb rate "$3" ceil "$3" || return 1
}

netns_hosts() {
  local prefix=$1 n=$2 subnet=$3 rate=$4 sw=${1}_sw i ns
  netns_add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up || return 1
  for i in $(seq 1 "$n"); do
    ns=${prefix}_h$i
    netns_add "$ns" || return 1
    # Interface names stay under 16 characters: the pid-based prefix is short.
    ip link add "h$i$prefix" type veth peer name "s$i$prefix" || return 1
    ip link set "h$i$prefix" netns "$ns" || return 1
    ip link set "s$i$prefix" netns "$sw" || return 1
    ip -n "$ns" link set "h$i$prefix" name hx || return 1
    ip -n "$sw" link set "s$i$prefix" master br0 || return 1
    ip -n "$ns" addr add "$subnet.$i/24" dev hx || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" link set hx up || return 1
    ip -n "$sw" link set "s$i$prefix" up || return 1
    netns_shape "$ns" hx "$rate" || return 1
    netns_shape "$sw" "s$i$prefix" "$rate" || return 1
  done
}

netns_reshape() {
  local prefix=$1 i=$2 rate=$3
  ip netns exec "${prefix}_h$i" tc class change dev hx parent 1: classid 1:10 htb rate "$rate" ceil "$rate" || return 1
  ip netns exec "${prefix}_sw" tc class change dev "s$i$prefix" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" ||
    return 1
}

netns_hosts_del() {
  local prefix=$1 n=$2 i
  for i in $(seq 1 "$n"); do ip netns del "${prefix}_h$i" 2>/dev/null; done
  ip netns del "${prefix}_sw" 2>/dev/null
}
