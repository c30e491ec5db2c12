#!/usr/bin/env bash
# prints: time busy% (of both cores) every 0.5 s
prev=($(awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $5}' /proc/stat))
while sleep 0.5; do
  cur=($(awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $5}' /proc/stat))
  db=$((cur[0]-prev[0])); di=$((cur[1]-prev[1]))
  echo "$(date +%s.%N | cut -c1-14) $(( 100*db/(db+di+1) ))"
  prev=(${cur[@]})
done
