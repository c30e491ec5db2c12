ip netns exec ${net}_h1 nstat -n >/dev/null; ip netns exec ${net}_h2 nstat -n > /dev/null
sleep 3
echo h1; ip netns exec ${net}_h1 nstat | grep -E "Retrans|Lost|Loss|TCPTimeouts|OFO|SACK|Prune|Collapse|RcvQDrop|Backlog" 
echo h2; ip netns exec ${net}_h2 nstat | grep -E "Retrans|Lost|Loss|TCPTimeouts|OFO|SACK|Prune|Collapse|RcvQDrop|Backlog"
ip netns exec ${net}_h1 tc -s qdisc show dev hx | head -8
