#!/usr/bin/env bash
# A GPU build on a machine without a GPU: the built-in runtime must find no device, say so once at
# NCCL_DEBUG=INFO ("no GPU visible (<runtime error>): host path"), and the allreduce must run on the host path.
# usage: host_path_test.sh APP; exits 77 (skipped) where a GPU is visible.
set -uo pipefail
app=$1
log=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$app" 2>&1)
rc=$?
echo "$log"
if echo "$log" | grep -qE "GPU runtime (cuda|hip): [1-9][0-9]* device\(s\) visible"; then
  echo "SKIP: a GPU is visible; this test is for machines without one"
  exit 77
fi
[ "$rc" = 0 ] || { echo "FAIL: the program exited with $rc"; exit 1; }
n=$(echo "$log" | grep -cE 'no GPU visible \(.+\): host path' || true)
[ "$n" = 1 ] || { echo "FAIL: expected the INFO line 'no GPU visible (...): host path' once, found it $n times"; exit 1; }
echo "OK: no GPU visible, host path used"
