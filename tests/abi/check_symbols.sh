#!/usr/bin/env bash
# Our libnccl.so.2 must export every symbol NVIDIA's libnccl.so.2 exports, the host entry points of
# the device API (ncclDevComm*/ncclGin*/ncclLsa*/ncclTeam*/ncclLLA2A*, which refuse or answer for
# chorus: src/api/device_api.cc) included, and nothing that is not part of the NCCL API.
# usage: check_symbols.sh OUR_LIB [NVIDIA_LIB]; exits 77 (skipped) without NVIDIA's library.
set -euo pipefail
ours=$1
theirs=${2:-}
mapfile -t our_syms < <(nm -D --defined-only "$ours" | awk '$2 ~ /[TtWwiV]/ {print $3}' | sed 's/@.*//' | sort -u)
echo "chorus exports ${#our_syms[@]} symbols"
bad=$(printf '%s\n' "${our_syms[@]}" | grep -Ev '^p?nccl[A-Z]' || true)
if [ -n "$bad" ]; then
  echo "FAIL: exported symbols outside the NCCL API:"; echo "$bad"; exit 1
fi
if [ -z "$theirs" ] || [ ! -f "$theirs" ]; then
  echo "SKIP: NVIDIA's libnccl.so.2 not found; only checked that nothing but the API is exported"
  exit 77
fi
mapfile -t their_syms < <(nm -D --defined-only "$theirs" | awk '{print $3}' | sed 's/@.*//' | grep -E '^p?nccl' | sort -u)
echo "NVIDIA's library exports ${#their_syms[@]} API symbols ($theirs)"
missing=$(comm -23 <(printf '%s\n' "${their_syms[@]}") <(printf '%s\n' "${our_syms[@]}"))
if [ -n "$missing" ]; then
  echo "FAIL: missing symbols:"; echo "$missing"; exit 1
fi
extra=$(comm -13 <(printf '%s\n' "${their_syms[@]}") <(printf '%s\n' "${our_syms[@]}"))
echo "OK: every API symbol of NVIDIA's library is exported${extra:+; chorus also exports: $(echo $extra)}"
