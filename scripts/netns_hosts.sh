# Sourced by scripts that play several hosts with network namespaces (tests/tools/doctor_netns_test.sh,
# perf/netns_ring_bench.sh). Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN).
#
#   netns_hosts PREFIX N SUBNET RATE [SUBNET2]: namespaces ${PREFIX}_h1 .. ${PREFIX}_hN, each with one interface
#     "hx" at SUBNET.i/24, joined by a bridge in namespace ${PREFIX}_sw; every link shaped with HTB to RATE both ways
#     (egress of hx and of the bridge port). With SUBNET2, every host has a second NIC on a second rail: "hy" at
#     SUBNET2.i/24 on a second bridge of the switch, shaped alike. With NETNS_TCP_CC set (cubic, bbr, reno), every
#     host's TCP uses that congestion control (a namespace otherwise takes the kernel's default, which is cubic on
#     Debian and bbr on some kernels). NETNS_INITCWND=N gives the route to SUBNET an initial congestion window of N
#     segments (Linux's is 10); NETNS_SLOW_START_AFTER_IDLE=0 keeps a connection's window over idle periods. Returns 1
#     on the first failure.
#   netns_reshape PREFIX I RATE [DEV]: changes host I's link rate on DEV (hx, or hy), both ways.
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

# netns_link PREFIX I DEV BRIDGE SUBNET RATE TAG: host I's interface DEV at SUBNET.I/24 on the switch's BRIDGE.
netns_link() {
  local prefix=$1 i=$2 dev=$3 br=$4 subnet=$5 rate=$6 tag=$7 ns=${1}_h$2 sw=${1}_sw
  # Interface names stay under 16 characters: the pid-based prefix is short.
  ip link add "h$i$tag$prefix" type veth peer name "s$i$tag$prefix" || return 1
  ip link set "h$i$tag$prefix" netns "$ns" || return 1
  ip link set "s$i$tag$prefix" netns "$sw" || return 1
  ip -n "$ns" link set "h$i$tag$prefix" name "$dev" || return 1
  ip -n "$sw" link set "s$i$tag$prefix" master "$br" || return 1
  ip -n "$ns" addr add "$subnet.$i/24" dev "$dev" || return 1
  ip -n "$ns" link set "$dev" up || return 1
  ip -n "$sw" link set "s$i$tag$prefix" up || return 1
  netns_shape "$ns" "$dev" "$rate" || return 1
  netns_shape "$sw" "s$i$tag$prefix" "$rate" || return 1
}

# netns_tcp_cc NS CC: NS's TCP congestion control. A namespace may pick only what the kernel allows
# (net.ipv4.tcp_allowed_congestion_control, one list for every namespace, set here from the caller's), so CC is added
# to it first where it is missing.
netns_tcp_cc() {
  local allowed
  allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control) || return 1
  case " $allowed " in
    *" $2 "*) ;;
    *) sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed $2" || return 1 ;;
  esac
  ip netns exec "$1" sysctl -qw net.ipv4.tcp_congestion_control="$2" || return 1
}

netns_hosts() {
  local prefix=$1 n=$2 subnet=$3 rate=$4 subnet2=${5:-} sw=${1}_sw i ns br
  netns_add "$sw" || return 1
  for br in br0 ${subnet2:+br1}; do
    ip -n "$sw" link add "$br" type bridge || return 1
    ip -n "$sw" link set "$br" up || return 1
  done
  for i in $(seq 1 "$n"); do
    ns=${prefix}_h$i
    netns_add "$ns" || return 1
    ip -n "$ns" link set lo up || return 1
    if [ -n "${NETNS_TCP_CC:-}" ]; then netns_tcp_cc "$ns" "$NETNS_TCP_CC" || return 1; fi
    netns_link "$prefix" "$i" hx br0 "$subnet" "$rate" "" || return 1
    if [ -n "${NETNS_INITCWND:-}" ]; then
      ip -n "$ns" route replace "$subnet.0/24" dev hx initcwnd "$NETNS_INITCWND" || return 1
    fi
    if [ "${NETNS_SLOW_START_AFTER_IDLE:-}" = 0 ]; then
      ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0 || return 1
    fi
    if [ -n "$subnet2" ]; then netns_link "$prefix" "$i" hy br1 "$subnet2" "$rate" y || return 1; fi
  done
}

netns_reshape() {
  local prefix=$1 i=$2 rate=$3 dev=${4:-hx} tag=
  [ "$dev" = hy ] && tag=y
  ip netns exec "${prefix}_h$i" tc class change dev "$dev" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" ||
    return 1
  ip netns exec "${prefix}_sw" tc class change dev "s$i$tag$prefix" parent 1: classid 1:10 htb rate "$rate" \
    ceil "$rate" || return 1
}

netns_hosts_del() {
  local prefix=$1 n=$2 i
  for i in $(seq 1 "$n"); do ip netns del "${prefix}_h$i" 2>/dev/null; done
  ip netns del "${prefix}_sw" 2>/dev/null
}
