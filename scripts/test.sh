#!/usr/bin/env bash
# Installs dependencies, then builds chorus three ways and runs the CPU test suite (ctest label "cpu") in each:
#   1. host build  (build/, or $BUILD_DIR): no GPU backend
#   2. CUDA build  (build-cuda/, sm_90 only): skipped when nvcc is not installed
#   3. HIP build   (build-hip/, gfx90a only, librccl.so.1)
# Without a GPU the GPU builds take the host path, so their CPU suites must pass too. Arguments go to ctest.
# CHORUS_GPU_BUILDS=0 runs the host build only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
JOBS=$(nproc)
NVCC=${CUDACXX:-/usr/local/cuda/bin/nvcc}
results=()
failed=0
failed_suites=()

# generator_for DIR: Ninja for a new build directory. With Makefiles a target's objects wait until the libraries it
# links are built, so in the HIP build every test object waited for the one long hipcc compile of the kernel; Ninja
# compiles them alongside it. A directory configured earlier keeps its generator (CMake refuses to change it).
generator_for() {
  if [ -f "$1/CMakeCache.txt" ]; then
    sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$1/CMakeCache.txt"
  elif command -v ninja > /dev/null; then
    echo Ninja
  else
    echo "Unix Makefiles"
  fi
}

# failure_excerpt DIR: for each of the first three tests that failed in DIR's last ctest run, the lines of its output
# that say why: from just before its first gtest failure (or its last lines, when it printed none), at most 12; then
# those of the first five "FAIL: " lines a test script printed that stand elsewhere in its output.
# Printed last, after the summary, where a log cut to its tail still shows them.
failure_excerpt() {
  local log=$1/Testing/Temporary/LastTest.log list=$1/Testing/Temporary/LastTestsFailed.log
  [ -f "$log" ] && [ -f "$list" ] || return 0
  local name
  while IFS= read -r name; do
    name=${name#*:}
    echo "--- $name ---"
    awk -v t="$name" '
      $0 ~ /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); cur = ($0 == t); next }
      cur && /^Output:$/ { inside = 1; getline; n = 0; first = 0; next }
      cur && inside && /^<end of output>$/ { inside = 0; cur = 0; done = 1; next }
      cur && inside {
        out[++n] = $0
        if (!first && /Failure$|Failure:|^\[  FAILED  \]|[Tt]imeout|Segmentation|Abort/) first = n
        if (/^FAIL: / && nfail < 5) said[++nfail] = n
      }
      END {
        if (!done && n == 0) { print "(no output recorded)"; exit }
        from = first ? (first > 1 ? first - 1 : 1) : (n > 12 ? n - 11 : 1)
        to = from + 11 < n ? from + 11 : n
        for (i = from; i <= to; i++) print substr(out[i], 1, 300)
        for (i = 1; i <= nfail; i++) if (said[i] < from || said[i] > to) print substr(out[said[i]], 1, 300)
      }' "$log"
  done < <(head -3 "$list")
}

# run_build NAME DIR CMAKE_ARGS...: configure, build and run the CPU suite; records the outcome and goes on.
run_build() {
  local name=$1 dir=$2
  shift 2
  local start=$SECONDS status=0
  echo "=== $name build ($dir) ==="
  cmake -S . -B "$dir" -G "$(generator_for "$dir")" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" || status=$?
  if [ "$status" = 0 ]; then cmake --build "$dir" -j"$JOBS" || status=$?; fi
  local built=$((SECONDS - start))
  if [ "$status" = 0 ]; then
    # A build without test timings of its own takes the host build's (the same tests), so ctest starts the longest
    # first rather than in the order they were declared, and the suite does not end on one long test.
    local costs=$dir/Testing/Temporary/CTestCostData.txt
    if [ ! -f "$costs" ] && [ -n "$cost_seed" ] && [ -f "$cost_seed" ]; then
      mkdir -p "$(dirname "$costs")" && cp "$cost_seed" "$costs"
    fi
    hip_kernel_nice 19
    (cd "$dir" && ctest -L cpu --output-on-failure -j2 --timeout 600 "${CTEST_ARGS[@]}") || {
      status=$?
      failed_suites+=("$name $dir")
    }
    hip_kernel_nice 0
  fi
  local msg="$name: build ${built}s, total $((SECONDS - start))s"
  if [ "$status" = 0 ]; then
    results+=("PASS $msg")
  else
    results+=("FAIL $msg (exit $status)")
    failed=1
  fi
}

# The three builds compile most sources (the tests above all) to the same preprocessed text: ccache compiles each once.
# Its cache lives in the tree (.ccache/, git-ignored), so a fresh clone starts cold and its timing is honest. Sources
# and include paths are absolute and objects relative to the build directory, which is left out of the hash, so
# build/ and build-cuda/ share entries (their debug information may name the directory that compiled first).
# CHORUS_CCACHE=0 turns it off.
LAUNCHER=()
if [ "${CHORUS_CCACHE:-1}" != "0" ] && command -v ccache > /dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$PWD/.ccache} CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  ccache -z > /dev/null
fi

# Line tables only (-g1): a failure's backtrace still names file and line, and the compiles take about a fifth less
# time (a clean host build alone: 235 s against 300 on 2 cores). CHORUS_DEBUG_INFO=-g keeps full debug information.
COMMON=("${LAUNCHER[@]}" -DCHORUS_DEBUG_INFO="${CHORUS_DEBUG_INFO:--g1}")

CTEST_ARGS=("$@")
HIP_ARGS=(-DCHORUS_CUDA=OFF -DCHORUS_HIP=ON -DCHORUS_HIP_ARCHS=gfx90a "${COMMON[@]}")
want_hip=0
if [ "${CHORUS_GPU_BUILDS:-1}" != "0" ] && command -v hipcc > /dev/null; then want_hip=1; fi

# The HIP build's kernel is one hipcc compile of about nine minutes on one core; alone at the end it left the other
# core idle. So it starts first, in the background, in a process group of its own, and shares the CPU with the host
# and CUDA builds. During the test suites it drops to the lowest priority (hip_kernel_nice), so the tests run as
# without it: they keep both cores busy (a suite measured 242 CPU-seconds in 158 s), and a compile at an equal share
# would slow them. The HIP build below waits for it (two builds never run in one directory at once).
hip_kernel_pid=
# hip_kernel_nice N: sets the early kernel compile's nice value (every process of its group; a raise back to 0 needs
# root, and without it the compile stays low).
hip_kernel_nice() {
  if [ -n "$hip_kernel_pid" ]; then renice -n "$1" -g "$hip_kernel_pid" > /dev/null 2>&1 || true; fi
}
if [ "$want_hip" = 1 ] && [ "${CHORUS_HIP_KERNEL_EARLY:-1}" != "0" ]; then
  mkdir -p build-hip
  if cmake -S . -B build-hip -G "$(generator_for build-hip)" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${HIP_ARGS[@]}" \
    > build-hip/early-configure.log 2>&1; then
    echo "=== HIP kernel: compiling in the background (build-hip/early-kernel.log) ==="
    # setsid makes the compile the leader of a new process group (a background job of this script leads none), so
    # its pid names the group renice changes.
    setsid cmake --build build-hip --target chorus_hip_kernel > build-hip/early-kernel.log 2>&1 &
    hip_kernel_pid=$!
  else
    echo "HIP kernel: configuring build-hip early failed (build-hip/early-configure.log); the HIP build will say why"
  fi
fi

cost_seed=
run_build host "${BUILD_DIR:-build}" -DCHORUS_CUDA=OFF -DCHORUS_HIP=OFF "${COMMON[@]}"
cost_seed=${BUILD_DIR:-build}/Testing/Temporary/CTestCostData.txt
if [ "${CHORUS_GPU_BUILDS:-1}" != "0" ]; then
  if [ -x "$NVCC" ] || command -v nvcc > /dev/null; then
    run_build cuda build-cuda -DCHORUS_CUDA=ON -DCHORUS_HIP=OFF -DCHORUS_CUDA_ARCHS=90 \
      -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo "$NVCC")" "${COMMON[@]}"
  else
    echo "CUDA build skipped: no nvcc (looked for $NVCC and nvcc on PATH)"
    results+=("SKIP cuda: no nvcc")
  fi
  if [ "$want_hip" = 1 ]; then
    if [ -n "$hip_kernel_pid" ]; then
      waited=$SECONDS
      # Its failure, if any, is the HIP build's to report: that build compiles the kernel again.
      wait "$hip_kernel_pid" || echo "HIP kernel: the early compile failed: $(tail -3 build-hip/early-kernel.log)"
      echo "HIP kernel: waited $((SECONDS - waited))s for the early compile"
    fi
    run_build hip build-hip "${HIP_ARGS[@]}"
  else
    echo "HIP build skipped: no hipcc"
    results+=("SKIP hip: no hipcc")
  fi
fi

echo "=== summary ==="
printf '%s\n' "${results[@]}"
if [ ${#LAUNCHER[@]} -gt 0 ]; then ccache -s | grep -Ei "^(cacheable|  hits|  misses|hits|misses)" || true; fi
for suite in "${failed_suites[@]}"; do
  echo "=== why the ${suite%% *} suite failed ==="
  failure_excerpt "${suite#* }"
done
exit "$failed"
