#!/usr/bin/env bash
# RCCL's library: librccl.map lists every symbol of libnccl.map plus RCCL's additions; libnccl.so.2 exports none of
# the additions; and librccl.so.1 (HIP builds only) has SONAME librccl.so.1 and exports exactly librccl.map.
# usage: check_rccl_symbols.sh LIBNCCL_MAP LIBRCCL_MAP LIBNCCL_SO [LIBRCCL_SO]
set -euo pipefail
nccl_map=$1 rccl_map=$2 nccl_so=$3 rccl_so=${4:-}
globals() {  # the names a version script exports
  sed -e 's|/\*.*\*/||g' "$1" | sed -n '/global:/,/local:/p' | grep -v -e 'global:' -e 'local:' |
    tr ';' '\n' | tr -d ' \t' | grep -v '^$' | sort -u
}
exported() { nm -D --defined-only "$1" | awk '$2 ~ /[TtWwiV]/ {print $3}' | sed 's/@.*//' | sort -u; }
missing=$(comm -23 <(globals "$nccl_map") <(globals "$rccl_map"))
[ -z "$missing" ] || { echo "FAIL: librccl.map lacks symbols of libnccl.map:"; echo "$missing"; exit 1; }
extras=$(comm -13 <(globals "$nccl_map") <(globals "$rccl_map"))
echo "librccl.map = libnccl.map + $(echo $extras)"
leaked=$(comm -12 <(echo "$extras") <(exported "$nccl_so"))
[ -z "$leaked" ] || { echo "FAIL: libnccl.so.2 exports RCCL-only symbols:"; echo "$leaked"; exit 1; }
if [ -z "$rccl_so" ]; then
  echo "OK (no librccl.so.1 in this build: only HIP builds make it)"
  exit 0
fi
soname=$(objdump -p "$rccl_so" | awk '/SONAME/ {print $2}')
[ "$soname" = "librccl.so.1" ] || { echo "FAIL: SONAME of $rccl_so is '$soname'"; exit 1; }
diff <(globals "$rccl_map") <(exported "$rccl_so") > /dev/null || {
  echo "FAIL: librccl.so.1 exports differ from librccl.map (< map only, > library only):"
  diff <(globals "$rccl_map") <(exported "$rccl_so") || true
  exit 1
}
echo "OK: librccl.so.1 exports exactly librccl.map ($(exported "$rccl_so" | wc -l) symbols)"
