#!/usr/bin/env bash
# GPU verification for a machine with a GPU (the device tool's H100: CUDA, CMake, ninja and PyTorch, no Debian
# packages), in phases that each fit one 10-minute command and each build first (a no-op when the build is there):
#   Here, once:   bash scripts/gpu_session.sh --fetch-deps     (downloads libgtest-dev into .gpu-carry/)
#   There:        bash scripts/gpu_session.sh core             (build, gpu tests, HBM roofline, 1-rank latency
#                                                               against NVIDIA's NCCL, PyTorch under LD_PRELOAD)
#                 bash scripts/gpu_session.sh perf             (-g 2/4/8 sweeps of four collectives, 2 processes;
#                                                               perf2, perf4, perf8 and procs run one part each)
#                 bash scripts/gpu_session.sh mps              (2/4/8 processes under MPS, 8 B-4 MB, through the
#                                                               IPC inboxes and through FIFOs)
#                 bash scripts/gpu_session.sh windows          (2/4/8 processes under MPS, 64 KB-256 MB, buffers in
#                                                               registered windows (-R 2), and allreduce without)
#                 bash scripts/gpu_session.sh lanes            (2 and 4 processes under MPS, 4 MB-256 MB through
#                                                               FIFOs, 1, 2 and 4 blocks per channel)
#                 bash scripts/gpu_session.sh channels         (2 and 4 processes under MPS, allreduce 64 MB-256 MB
#                                                               through FIFOs, 2-16 channels x 1-4 blocks each)
#                 bash scripts/gpu_session.sh                  (core and perf)
#                 BUDGET_S=400 bash scripts/gpu_session.sh lease
#                                                              (issue 18's measurements in one lease, most telling
#                                                               first, skipping what the budget no longer allows: 1 rank
#                                                               under NVIDIA's nccl-tests against NVIDIA's NCCL; 2/4/8
#                                                               processes under MPS, plain, in windows (-R 2) and in
#                                                               CUDA graphs (-G); 2/4/8 thread ranks; the GPU tests)
#                 bash scripts/gpu_session.sh sweep            (CHORUS_DEVICE_NCHANNELS 2-32 on 2 and 4 processes)
#                 bash scripts/gpu_session.sh topo segv staging
#                                                              (chorus's topology probe beside NVIDIA NCCL's dump; the
#                                                               thread-rank allreduce test repeated, a crash's stack
#                                                               resolved; device buffers between two NCCL_HOSTID hosts
#                                                               against NVIDIA NCCL, with NCCL_RUNTIME_CONNECT=0, and
#                                                               sends over the test net plugin's two devices)
#                 STAGE_CASES="name:VAR=VALUE,... ..." bash scripts/gpu_session.sh stagesweep
#                                                              (staged allreduce under settings, beside NVIDIA NCCL)
#                 OLD_SRC=DIR bash scripts/gpu_session.sh latency
#                                                              (8 B-64 KB allreduce: this build, DIR's, NVIDIA's NCCL)
#                 VARIANTS="name:DEFINITION ..." bash scripts/gpu_session.sh variants
#                                                              (this build against builds of the library with other
#                                                               compile-time definitions, preloaded, back to back:
#                                                               allreduce and reduce-scatter on 2 and 4 processes
#                                                               under MPS; a kernel change's A/B in one lease)
# NVIDIA's nccl-tests (phase lease) is built from a copy the first step puts in .gpu-carry/nccl-tests (never
# committed), against the NCCL that PyTorch ships.
# Logs go to $LOGS (default out/gpu). When $OUT is set (the device tool), they are also packed into one file
# $OUT/gpu-<phases>.tgz, because only a few files come back from a run.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
if [ "${1:-}" = "--fetch-deps" ]; then
  # NT_SRC: a checkout of NVIDIA/nccl-tests to take along (the device machine reaches no network).
  mkdir -p "$CARRY" && (cd "$CARRY" && apt-get download libgtest-dev googletest) && ls "$CARRY"
  if [ -n "${NT_SRC:-}" ]; then
    rm -rf "$CARRY/nccl-tests" && mkdir -p "$CARRY/nccl-tests" &&
      git --git-dir="$NT_SRC" archive HEAD | tar x -C "$CARRY/nccl-tests"
  fi
  exit 0
fi
PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(core perf)
LOGS=${LOGS:-out/gpu}
mkdir -p "$LOGS"
BUILD=${BUILD_DIR:-build-gpu}
# A kernel that cannot progress gives up after this long (the default is minutes): a broken step costs seconds.
export CHORUS_TIMEOUT_S=${CHORUS_TIMEOUT_S:-30}
log() { echo "== $(date -u +%T) $*" | tee -a "$LOGS/session.log"; }
# BUDGET_S: seconds the whole session may take (0: no limit); a command is cut to what is left, and skipped when
# under 15 s are left, so that the logs are packed before the device tool's own limit.
BUDGET_S=${BUDGET_S:-0}
left() { [ "$BUDGET_S" -gt 0 ] && echo $((BUDGET_S - SECONDS)) || echo 100000; }
# run SECONDS LOGFILE COMMAND...: bounded, logged, the tail shown.
run() {
  local secs=$1 file=$2
  shift 2
  local rest
  rest=$(left)
  if [ "$rest" -lt 15 ]; then
    echo "skipped: budget spent" > "$LOGS/$file"
    log "skipped $file: budget spent"
    return 124
  fi
  [ "$secs" -gt $((rest - 10)) ] && secs=$((rest - 10))
  timeout -k 5 "$secs" "$@" > "$LOGS/$file" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && echo "(exit $rc)" >> "$LOGS/$file"
  tail -4 "$LOGS/$file"
  return $rc
}
pack() {
  [ -n "${OUT:-}" ] || return 0
  local name
  name=$(IFS=-; echo "${PHASES[*]}")
  tar czf "$OUT/gpu-$name.tgz" -C "$LOGS" . && log "logs packed into gpu-$name.tgz"
}
trap pack EXIT

build() {
  log "date $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), phases ${PHASES[*]}"
  nvidia-smi > "$LOGS/nvidia-smi.txt" 2>&1
  local prefix="" gen=""
  if ls "$CARRY"/*.deb > /dev/null 2>&1; then
    for d in "$CARRY"/*.deb; do dpkg -x "$d" "$CARRY/root"; done
    prefix="-DCMAKE_PREFIX_PATH=$PWD/$CARRY/root/usr"
  fi
  command -v ninja > /dev/null && gen="-G Ninja"
  log "configure + build (CUDA sm_90)"
  # CMAKE_EXTRA: more configure arguments (-DCMAKE_CXX_FLAGS=-g for stacks with lines).
  local cfg=(-S . -B "$BUILD" $gen -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA=ON -DCHORUS_CUDA_ARCHS=90 $prefix
    ${CMAKE_EXTRA:-})
  if ! cmake "${cfg[@]}" -DCHORUS_BUILD_TESTS=ON >> "$LOGS/build.log" 2>&1; then
    # Without GoogleTest (no carried debs) the perf tools and the PyTorch check still run.
    log "configure failed with the tests (GoogleTest missing?); building without them"
    cmake "${cfg[@]}" -DCHORUS_BUILD_TESTS=OFF >> "$LOGS/build.log" 2>&1 ||
      { log "configure failed"; tail -30 "$LOGS/build.log"; exit 1; }
    BUILD_TARGETS=${BUILD_TARGETS//test_gpu/}
  fi
  local targets=()
  [ -n "${BUILD_TARGETS:-}" ] && targets=(--target $BUILD_TARGETS)
  { time cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}"; } >> "$LOGS/build.log" 2>&1 ||
    { log "build failed"; tail -30 "$LOGS/build.log"; exit 1; }
  log "built"
}

# NVIDIA's nccl-tests, unchanged, against the NCCL PyTorch ships (NV_NCCL_LIB). The same binaries run chorus with
# LD_LIBRARY_PATH at its build (both libraries are libnccl.so.2).
NT=$PWD/out/nccl-tests
NV_NCCL_ROOT=""
ntBuild() {
  local root=$NV_NCCL_ROOT
  [ -n "$root" ] && [ -f "$root/lib/libnccl.so.2" ] || { log "NVIDIA NCCL not found beside PyTorch"; return 1; }
  [ -d "$CARRY/nccl-tests/src" ] || { log "no nccl-tests source in $CARRY (run --fetch-deps with NT_SRC)"; return 1; }
  # nccl-tests links -lnccl: a home whose lib/ has the unversioned name.
  local home=$PWD/out/nccl-home
  mkdir -p "$home/lib" && ln -sfn "$root/include" "$home/include" && ln -sf "$root/lib/libnccl.so.2" "$home/lib/libnccl.so"
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  command -v nvcc > /dev/null && cuda=$(dirname "$(dirname "$(command -v nvcc)")")
  make -C "$CARRY/nccl-tests/src" -j"$(nproc)" MPI=0 CUDA_HOME="$cuda" NCCL_HOME="$home" BUILDDIR="$NT" \
    NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 > "$LOGS/nccl-tests-build.log" 2>&1
}
buildAll() {
  NV_NCCL_ROOT=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2> /dev/null)
  ntBuild &
  local nt=$!
  build
  wait $nt && log "nccl-tests built" || log "nccl-tests build failed (nccl-tests-build.log)"
}

# Builds of the library alone with other compile-time definitions, for phase variants: VARIANTS lists name:NAME=VALUE
# pairs, each built in $BUILD-name.
VARIANTS=${VARIANTS:-}
buildVariants() {
  local gen="" pids=() v
  command -v ninja > /dev/null && gen="-G Ninja"
  for v in $VARIANTS; do
    local name=${v%%:*} def=${v#*:}
    (cmake -S . -B "$BUILD-$name" $gen -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA=ON -DCHORUS_CUDA_ARCHS=90 \
      -DCHORUS_BUILD_TESTS=OFF -DCMAKE_CXX_FLAGS=-D$def -DCMAKE_CUDA_FLAGS=-D$def > "$LOGS/build-$name.log" 2>&1 &&
      cmake --build "$BUILD-$name" -j"$(nproc)" --target nccl >> "$LOGS/build-$name.log" 2>&1) &
    pids+=($!)
  done
  local ok=0
  for p in "${pids[@]}"; do wait "$p" || ok=1; done
  return $ok
}

# ntCompare LOGNAME ARGS...: one nccl-tests binary at 1 rank, NVIDIA's NCCL then chorus, back to back.
ntCompare() {
  local name=$1 tool=$2
  shift 2
  [ -x "$NT/$tool" ] || return 0
  log "nccl-tests $tool $*: NVIDIA NCCL, then chorus"
  # Each log starts with the libnccl.so.2 the loader picked (both libraries report version 2.28.9).
  local withLib='ldd "$0" | grep libnccl; exec "$0" "$@"'
  run 60 "nt_${name}_nvidia.log" env LD_LIBRARY_PATH="$NV_NCCL_ROOT/lib" bash -c "$withLib" "$NT/$tool" "$@"
  run 60 "nt_${name}_chorus.log" env LD_LIBRARY_PATH="$PWD/$BUILD" bash -c "$withLib" "$NT/$tool" "$@"
}

# roofline: the copy bandwidth every busbw is judged against, measured in the same run.
roofline() {
  log "HBM roofline (device-to-device copy, torch)"
  run 60 roofline.txt python3 - << 'PY'
import torch
n = 1 << 30
x = torch.empty(n, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): y.copy_(x)
e.record(); torch.cuda.synchronize()
t = s.elapsed_time(e) / 20 / 1e3
print(f"{torch.cuda.get_device_name()}: copy of {n} B in {t*1e6:.1f} us = {n/t/1e9:.1f} GB/s copied "
      f"({2*n/t/1e9:.1f} GB/s of HBM traffic, read + write)")
PY
}

# lease: issue 18's measurements, most telling first (see the header).
lease() {
  nt
  multi
  gpuTests
}

# nt: 1 rank, NVIDIA's nccl-tests against NVIDIA's NCCL and chorus, and the copy bandwidth.
nt() {
  roofline
  nvidia-smi -q -d CLOCK,PERFORMANCE > "$LOGS/nvidia-smi-clocks.txt" 2>&1
  ntCompare all_reduce all_reduce_perf -b 8 -e 256M -f 2
  ntCompare all_reduce_graph all_reduce_perf -b 8 -e 64K -f 2 -G 10
  [ -n "${NT_ALL_REDUCE_ONLY:-}" ] && return
  for t in all_gather reduce_scatter alltoall broadcast sendrecv; do ntCompare "$t" "${t}_perf" -b 8 -e 256M -f 4; done
}

# multi: 2/4/8 processes under MPS (plain, windows), 2/4/8 thread ranks of one process (perf), then CUDA graphs.
multi() {
  startMps
  for np in 2 4 8; do
    for t in all_reduce all_gather reduce_scatter alltoall; do
      log "$t, $np processes under MPS"
      run 60 "${t}_mps_n${np}.log" "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/${t}_perf" -b 8 -e 256M -f 4 \
        --mem device
    done
    for t in all_reduce all_gather reduce_scatter alltoall; do
      log "$t, $np processes under MPS, buffers in windows"
      run 60 "${t}_mps_n${np}_windows.log" "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/${t}_perf" -b 64K \
        -e 256M -f 4 --mem device -R 2
    done
  done
  log "what the device path chose (NCCL_DEBUG=INFO), 2 processes, 64 MB, plain and in windows"
  run 30 all_reduce_mps_n2_info.txt env NCCL_DEBUG=INFO "$BUILD/perf/chorusrun" -n 2 "$BUILD/perf/all_reduce_perf" \
    -b 64M -e 64M --mem device
  run 30 all_reduce_mps_n2_windows_info.txt env NCCL_DEBUG=INFO "$BUILD/perf/chorusrun" -n 2 \
    "$BUILD/perf/all_reduce_perf" -b 64M -e 64M --mem device -R 2
  stopMps
  perf 2 4 8
  graphs
}

# graphs: allreduce 8 B-64 KB captured in CUDA graphs (-G), 2/4/8 processes under MPS and 2/4/8 thread ranks.
graphs() {
  startMps
  for np in 2 4 8; do
    run 60 "all_reduce_mps_n${np}_graph.log" "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/all_reduce_perf" -b 8 \
      -e 64K -f 2 --mem device -G 10
  done
  stopMps
  for np in 2 4 8; do
    run 60 "all_reduce_g${np}_graph.log" "$BUILD/perf/all_reduce_perf" -g "$np" -b 8 -e 64K -f 2 --mem device -G 10
  done
}

# threads8: the thread-rank sweeps at 8 ranks (and alltoall at 4).
threads8() {
  run 60 alltoall_g4.log "$BUILD/perf/alltoall_perf" -g 4 -b 8 -e 256M -f 4 --mem device
  perf 8
}

# ag8: the allgather of 8 processes through FIFOs that once gave wrong values, 3 more times around 2 MB.
ag8() {
  startMps
  for k in $(seq "${AG8_REPS:-3}"); do
    run 60 "all_gather_mps_n8_rep${k}.log" env CHORUS_PERF_VERBOSE=1 "$BUILD/perf/chorusrun" -n 8 \
      "$BUILD/perf/all_gather_perf" -b 512K -e 8M -f 2 --mem device
  done
  stopMps
}

# capturediag: the graph-capture test with the library's warnings, lazily and eagerly loaded modules.
capturediag() {
  # tests/gpu/capture_probe.cu: which runtime calls invalidate a capture.
  if nvcc -O1 -gencode=arch=compute_90,code=sm_90 -o out/capture_probe tests/gpu/capture_probe.cu \
    > "$LOGS/capture_probe_build.log" 2>&1; then
    run 30 capture_probe.txt out/capture_probe
  fi
  local t="$BUILD/tests/test_gpu"
  [ -x "$t" ] || return 0
  run 60 capture_warn.log env NCCL_DEBUG=WARN "$t" --gtest_filter='*GraphCapture*'
  run 60 capture_eager.log env NCCL_DEBUG=WARN CUDA_MODULE_LOADING=EAGER "$t" --gtest_filter='*GraphCapture*'
}

gpuTests() {
  log "gpu tests"
  local rest
  rest=$(left)
  [ "$rest" -lt 40 ] && { log "gpu tests skipped: budget spent"; return; }
  [ "$rest" -gt 300 ] && rest=300
  (cd "$BUILD" && timeout -k 5 $((rest - 10)) ctest -L gpu --output-on-failure --timeout 90) > "$LOGS/ctest-gpu.log" 2>&1
  tail -8 "$LOGS/ctest-gpu.log"
  # A failure is run twice more on its own: a flake and a defect read differently.
  local failed
  failed=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Failed).*/\1/p' "$LOGS/ctest-gpu.log" | paste -sd'|')
  if [ -n "$failed" ] && [ "$(left)" -gt 60 ]; then
    for k in 1 2; do
      (cd "$BUILD" && timeout -k 5 60 ctest -R "^($failed)\$" --output-on-failure --timeout 30) \
        > "$LOGS/ctest-gpu-rerun$k.log" 2>&1
      tail -3 "$LOGS/ctest-gpu-rerun$k.log"
    done
  fi
}

# variants: allreduce (FIFOs and windows) and reduce-scatter (FIFOs), 64-256 MB, processes under MPS, with this
# build's library and then each variant's preloaded, back to back.
variants() {
  [ -n "$VARIANTS" ] || { log "variants: VARIANTS is empty"; return; }
  startMps
  # VARIANT_CASES: processes:collective:-R of each comparison.
  for c in ${VARIANT_CASES:-2:all_reduce:0 2:all_reduce:2 2:reduce_scatter:0 4:all_reduce:0 4:all_reduce:2}; do
    local np=${c%%:*} t=${c#*:}
    local coll=${t%:*} r=${t#*:}
    for lib in this $VARIANTS; do
      lib=${lib%%:*}
      local pre=""
      if [ "$lib" != this ]; then
        pre=$PWD/$BUILD-$lib/libnccl.so.2
        [ -f "$pre" ] || { log "no $lib build"; continue; }
      fi
      log "$coll, $np processes under MPS, -R $r, library: $lib"
      run 60 "${coll}_mps_n${np}_R${r}_${lib}.log" env LD_PRELOAD="$pre" "$BUILD/perf/chorusrun" -n "$np" \
        "$BUILD/perf/${coll}_perf" -b 64M -e 256M -f 2 --mem device -R "$r"
    done
  done
  stopMps
}

# sweep: CHORUS_DEVICE_NCHANNELS 2-32 (the build caps it), 2 and 4 processes under MPS, allreduce 64-256 MB through
# FIFOs and in windows: the smallest setting within 90% of the best becomes the default.
sweep() {
  startMps
  for np in ${SWEEP_NP:-2 4}; do
    for ch in ${SWEEP_CHANNELS:-2 4 8 16 32}; do
      for r in ${SWEEP_R:-0 2}; do
        log "all_reduce, $np processes under MPS, CHORUS_DEVICE_NCHANNELS=$ch, -R $r"
        run 60 "all_reduce_mps_n${np}_ch${ch}_R${r}.log" env CHORUS_DEVICE_NCHANNELS=$ch "$BUILD/perf/chorusrun" \
          -n "$np" "$BUILD/perf/all_reduce_perf" -b 64M -e 256M -f 2 --mem device -R "$r"
      done
    done
  done
  stopMps
}

core() {
  gpuTests
  roofline
  log "latency 8 B - 64 KiB, 1 rank: chorus vs NVIDIA NCCL (PyTorch's) with the same tool"
  run 60 latency_chorus_g1.log "$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 64K -f 2 --mem device
  local nv
  nv=$(nvLib)
  if [ -n "$nv" ] && [ -f "$nv" ]; then
    run 60 latency_nvidia_g1.log env LD_PRELOAD="$nv" "$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 64K -f 2 --mem device
  else
    log "NVIDIA NCCL library not found next to PyTorch"
  fi
  torchCheck
}

torchCheck() {
  log "PyTorch under LD_PRELOAD of chorus"
  run 120 torch_check.log env LD_PRELOAD="$PWD/$BUILD/libnccl.so.2" PYTHONUNBUFFERED=1 python3 tests/gpu/torch_check.py
}

# perf RANKS...: one process with -g ranks on the one GPU (their kernels run concurrently).
perf() {
  for np in "$@"; do
    for t in all_reduce all_gather reduce_scatter alltoall; do
      log "$t g=$np"
      run 60 "${t}_g${np}.log" "$BUILD/perf/${t}_perf" -g "$np" -b 8 -e 256M -f 4 --mem device
    done
  done
}

# Separate processes time-slice the GPU without MPS (docs/device_path.md): one small run shows that they work.
procs() {
  log "all_reduce, 2 processes through IPC"
  run 90 all_reduce_n2_processes.log "$BUILD/perf/chorusrun" -n 2 "$BUILD/perf/all_reduce_perf" -b 8 -e 16M -f 8 \
    --mem device
}

# TWO_HOSTS COMMAND...: two processes of COMMAND under chorusrun, each naming its own host (NCCL_HOSTID), so that
# everything between them goes through the net (for phases staging and stagesweep).
TWO_HOSTS=("$BUILD/perf/chorusrun" -n 2 bash -c 'export NCCL_HOSTID=gpu-host-$RANK; exec "$@"' _)

# stagesweep: phase staging's allreduce from 16 MB under settings that change what the net proxy moves (STAGE_CASES:
# name:VAR=VALUE[,VAR=VALUE]), beside NVIDIA's NCCL, in one run.
stagesweep() {
  startMps
  local c name envs nv
  nv=$(nvLib)
  for c in ${STAGE_CASES:-default:X=0}; do
    name=${c%%:*}
    envs=${c#*:}
    log "staging allreduce 16-256 MB, $name (${envs//,/ })"
    run 90 "stagesweep_$name.log" env ${envs//,/ } "${TWO_HOSTS[@]}" "$BUILD/perf/all_reduce_perf" -b 16M -e 256M \
      -f 4 --mem device
  done
  [ -n "$nv" ] && run 90 stagesweep_nvidia.log env LD_PRELOAD="$nv" "${TWO_HOSTS[@]}" "$BUILD/perf/all_reduce_perf" \
    -b 16M -e 256M -f 4 --mem device
  stopMps
}

# OLD_SRC: a source tree of an earlier commit (git archive into a git-ignored folder here, carried), built alone in
# OLD_SRC/b beside this build, for phase latency's A/B.
OLD_SRC=${OLD_SRC:-}
buildOld() {
  local gen=""
  command -v ninja > /dev/null && gen="-G Ninja"
  cmake -S "$OLD_SRC" -B "$OLD_SRC/b" $gen -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA=ON -DCHORUS_CUDA_ARCHS=90 \
    -DCHORUS_BUILD_TESTS=OFF > "$LOGS/build-old.log" 2>&1 &&
    cmake --build "$OLD_SRC/b" -j"$(nproc)" --target nccl >> "$LOGS/build-old.log" 2>&1
}

# latency: allreduce 8 B-64 KB at 1 rank and on 2 processes under MPS; this build, the OLD_SRC build and NVIDIA's
# NCCL (preloaded into the same perf tool), one after the other, LAT_REPS rounds: what a change costs a call.
latency() {
  local nv k lib pre
  nv=$(nvLib)
  startMps
  for k in $(seq "${LAT_REPS:-2}"); do
    for lib in this old nvidia; do
      pre=""
      [ "$lib" = old ] && { pre=$PWD/$OLD_SRC/b/libnccl.so.2; [ -f "$pre" ] || continue; }
      [ "$lib" = nvidia ] && { pre=$nv; [ -n "$pre" ] || continue; }
      log "latency, library $lib, round $k"
      run 60 "latency_g1_${lib}_r$k.log" env LD_PRELOAD="$pre" "$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 64K -f 4 \
        --mem device -n "${LAT_ITERS:-20}"
      run 60 "latency_mps_n2_${lib}_r$k.log" env LD_PRELOAD="$pre" "$BUILD/perf/chorusrun" -n 2 \
        "$BUILD/perf/all_reduce_perf" -b 8 -e 64K -f 4 --mem device -n "${LAT_ITERS:-20}"
    done
  done
  stopMps
}

# nvLib: the NCCL library PyTorch ships ("" when there is none).
nvLib() {
  python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' \
    2> /dev/null
}

# topo: the host as chorus sees it (chorus-topo's probe, and the view at a communicator's init with the GPU runtime's
# bus ids) beside what NVIDIA's NCCL dumps (NCCL_TOPO_DUMP_FILE, its own XML) and what the system says.
topo() {
  log "topology: chorus's view, NVIDIA NCCL's dump, the system's"
  {
    nvidia-smi topo -m
    nvidia-smi --query-gpu=index,pci.bus_id,name --format=csv
    for n in /sys/class/net/* /sys/class/infiniband/*; do
      [ -e "$n" ] && echo "$n -> $(readlink -f "$n/device" 2> /dev/null) speed $(cat "$n/speed" 2> /dev/null)"
    done
    command -v lspci > /dev/null && lspci -tv
  } > "$LOGS/topo-system.txt" 2>&1
  command -v lstopo-no-graphics > /dev/null && lstopo-no-graphics --of xml > "$LOGS/topo-lstopo.xml" 2>&1
  run 30 topo-chorus-probe.txt "$BUILD/tools/topo/chorus-topo" --dump "$PWD/$LOGS/topo-chorus-probe.xml"
  run 60 topo-chorus-init.txt env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_TOPO_DUMP_FILE="$PWD/$LOGS/topo-chorus-init.xml" \
    "$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 8 --mem device
  run 30 topo-chorus-init-view.txt "$BUILD/tools/topo/chorus-topo" --file "$PWD/$LOGS/topo-chorus-init.xml"
  local nv
  nv=$(nvLib)
  [ -n "$nv" ] && run 60 topo-nvidia.txt env LD_PRELOAD="$nv" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH \
    NCCL_TOPO_DUMP_FILE="$PWD/$LOGS/topo-nvidia.xml" "$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 8 --mem device
}

# segv: the thread-rank allreduce test that once died of SIGSEGV (H200, 2026-11-27), SEGV_REPS times; a crashing
# child prints its stack (tests/harness printStackOnCrash), resolved here with addr2line.
segv() {
  local t="$BUILD/tests/test_gpu" k
  [ -x "$t" ] || { log "segv: no test_gpu"; return; }
  log "Drivers/Gpu.AllReduceSeveralRanksOneGpu/threads x ${SEGV_REPS:-10}"
  for k in $(seq "${SEGV_REPS:-10}"); do
    run 60 "segv-rep$k.txt" "$t" --gtest_filter='Drivers/Gpu.AllReduceSeveralRanksOneGpu/threads' > /dev/null
    if grep -q '^\*\*\* signal' "$LOGS/segv-rep$k.txt"; then
      log "rep $k crashed"
      sed -n 's/^\(\/[^(]*\)(+\(0x[0-9a-f]*\)).*/\1 \2/p' "$LOGS/segv-rep$k.txt" | while read -r f a; do
        echo "$f $a: $(addr2line -f -C -i -e "$f" "$a" 2> /dev/null | paste -sd' ')"
      done > "$LOGS/segv-rep$k-stack.txt"
    fi
  done
  grep -c "\[  PASSED  \] 1 test" "$LOGS"/segv-rep*.txt | tee -a "$LOGS/session.log"
}

# staging: device buffers between two NCCL_HOSTID hosts on the one GPU (network staging through the socket net),
# chorus then NVIDIA's NCCL (its NET transport) with the same perf tool, and chorus with host buffers (the net alone).
staging() {
  startMps
  local nv t
  nv=$(nvLib)
  for t in all_reduce all_gather; do
    log "$t, 2 processes on two NCCL_HOSTID hosts, device buffers: chorus, then NVIDIA NCCL"
    run 90 "staging_${t}_chorus.log" "${TWO_HOSTS[@]}" "$BUILD/perf/${t}_perf" -b 64K -e 256M -f 4 --mem device
    [ -n "$nv" ] && run 90 "staging_${t}_nvidia.log" env LD_PRELOAD="$nv" "${TWO_HOSTS[@]}" "$BUILD/perf/${t}_perf" \
      -b 64K -e 256M -f 4 --mem device
  done
  run 90 staging_all_reduce_chorus_host.log "${TWO_HOSTS[@]}" "$BUILD/perf/all_reduce_perf" -b 64K -e 256M -f 4 \
    --mem host
  run 60 staging_info_chorus.txt env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "${TWO_HOSTS[@]}" \
    "$BUILD/perf/all_reduce_perf" -b 64M -e 64M --mem device
  [ -n "$nv" ] && run 60 staging_info_nvidia.txt env LD_PRELOAD="$nv" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
    "${TWO_HOSTS[@]}" "$BUILD/perf/all_reduce_perf" -b 64M -e 64M --mem device
  # NCCL_RUNTIME_CONNECT=0: the device path's FIFOs made at init (INFO INIT: "device connection ends made at init"),
  # and the collectives after it right.
  run 60 staging_runtime_connect.txt env NCCL_RUNTIME_CONNECT=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
    "${TWO_HOSTS[@]}" "$BUILD/perf/all_reduce_perf" -b 8 -e 64M -f 8 --mem device
  # Sends of device buffers over two NICs (the test net plugin's two devices over one interface): a launch's lanes
  # take the NICs in turn (INFO NET: connections on dev 0 and dev 1), and the data is right.
  local plugin="$BUILD/tests/libnccl-net-chorustest-v11.so"
  [ -f "$plugin" ] && run 60 staging_sendrecv_two_nics.txt env NCCL_NET_PLUGIN="$plugin" NCCL_NET=ChorusTestNet \
    CHORUS_TEST_NET_DEVICES=nic0,nic1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET "${TWO_HOSTS[@]}" \
    "$BUILD/perf/sendrecv_perf" -b 1M -e 64M -f 4 --mem device
  stopMps
}

# The MPS daemon, so that the processes' kernels run side by side rather than in time slices.
startMps() {
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/chorus-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/chorus-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d 2>> "$LOGS/session.log" || log "MPS did not start"
}
stopMps() { echo quit | nvidia-cuda-mps-control; }

# mps: 2, 4 and 8 processes on the one GPU under MPS (so their kernels run side by side), small and mid sizes,
# through the IPC inboxes (the default) and through FIFOs (CHORUS_DEVICE_IPC=0), back to back.
mps() {
  startMps
  for np in 2 4 8; do
    for ipc in 1 0; do
      for t in all_reduce all_gather; do
        log "$t, $np processes under MPS, CHORUS_DEVICE_IPC=$ipc"
        run 60 "${t}_mps_n${np}_ipc${ipc}.log" env CHORUS_DEVICE_IPC=$ipc "$BUILD/perf/chorusrun" -n "$np" \
          "$BUILD/perf/${t}_perf" -b 8 -e 4M -f 2 --mem device
      done
    done
  done
  stopMps
}

# windows: 2, 4 and 8 processes under MPS with their buffers in registered windows (-R 2: collectives above 64 KB
# run on the peers' own buffers, docs/device_path.md), and allreduce without (inboxes, then FIFOs), back to back.
windows() {
  startMps
  for np in 2 4 8; do
    for t in all_reduce all_gather reduce_scatter alltoall; do
      log "$t, $np processes under MPS, buffers in windows"
      run 60 "${t}_mps_n${np}_windows.log" "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/${t}_perf" -b 64K -e 256M \
        -f 4 --mem device -R 2
    done
    log "all_reduce, $np processes under MPS, buffers not registered"
    run 60 "all_reduce_mps_n${np}_plain.log" "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/all_reduce_perf" -b 64K \
      -e 256M -f 4 --mem device
  done
  stopMps
}

# lanes: 2 and 4 processes under MPS, buffers not registered (so large calls go through FIFOs), with 1, 2 and 4
# blocks per channel (CHORUS_DEVICE_CHANNEL_BLOCKS), back to back: which setting the default should be.
lanes() {
  startMps
  for np in 2 4; do
    for blocks in 1 2 4; do
      for t in all_reduce all_gather; do
        log "$t, $np processes under MPS, through FIFOs, $blocks block(s) per channel"
        run 90 "${t}_mps_n${np}_lanes${blocks}.log" env CHORUS_DEVICE_CHANNEL_BLOCKS=$blocks \
          "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/${t}_perf" -b 4M -e 256M -f 4 --mem device
      done
    done
  done
  stopMps
}

# channels: the sweep that sets the defaults (fewest blocks within 90% of the best busbw from 64 MB up): allreduce
# through FIFOs on 2 and 4 processes under MPS, CHORUS_DEVICE_NCHANNELS 2 to 16 and 1 to 4 blocks per channel.
channels() {
  startMps
  for np in 2 4; do
    for ch in 2 4 8 16; do
      for blocks in 1 2 4; do
        log "all_reduce, $np processes under MPS, through FIFOs, $ch channels x $blocks block(s)"
        run 60 "all_reduce_mps_n${np}_ch${ch}x${blocks}.log" env CHORUS_DEVICE_NCHANNELS=$ch \
          CHORUS_DEVICE_CHANNEL_BLOCKS=$blocks "$BUILD/perf/chorusrun" -n "$np" "$BUILD/perf/all_reduce_perf" \
          -b 64M -e 256M -f 2 --mem device
      done
    done
  done
  stopMps
}

case " ${PHASES[*]} " in
  *" variants "*) buildVariants & ;;
esac
VARIANTS_PID=${!:-}
OLD_PID=""
if [ -n "$OLD_SRC" ]; then
  buildOld &
  OLD_PID=$!
fi
case " ${PHASES[*]} " in
  *" lease "* | *" nt "*) buildAll ;;
  *) build ;;
esac
case " ${PHASES[*]} " in
  *" variants "*) wait $VARIANTS_PID && log "variant builds done" || log "a variant build failed (build-NAME.log)" ;;
esac
[ -n "$OLD_PID" ] && { wait "$OLD_PID" && log "OLD_SRC built" || log "OLD_SRC build failed (build-old.log)"; }
for p in "${PHASES[@]}"; do
  case "$p" in
    core) core ;;
    perf) perf 2 4 8 && procs ;;
    perf[0-9]*) perf "${p#perf}" ;;
    procs) procs ;;
    mps) mps ;;
    windows) windows ;;
    lanes) lanes ;;
    channels) channels ;;
    lease) lease ;;
    nt) nt ;;
    multi) multi ;;
    capturediag) capturediag ;;
    graphs) graphs ;;
    ag8) ag8 ;;
    threads8) threads8 ;;
    sweep) sweep ;;
    variants) variants ;;
    torch) torchCheck ;;
    ag8x1) AG8_REPS=1 ag8 ;;
    gputests) gpuTests ;;
    topo) topo ;;
    segv) segv ;;
    staging) staging ;;
    latency) latency ;;
    stagesweep) stagesweep ;;
    *) log "unknown phase $p (core, perf, perfN, procs, mps, windows, lanes, channels, lease, nt, multi, capturediag, graphs, ag8, ag8x1, threads8, sweep, variants, torch, gputests, topo, segv, staging, latency, stagesweep)" ;;
  esac
done
log "done"
# The reply shows the end of the output: one line per run with its average busbw and wrong values.
for f in "$LOGS"/*.log; do
  avg=$(grep -m1 "Avg bus bandwidth" "$f" | awk '{print $NF}')
  oob=$(grep -m1 "Out of bounds" "$f" | sed 's/.*: //')
  [ -n "$avg$oob" ] && printf '%-40s busbw %-10s %s\n' "$(basename "$f" .log)" "$avg" "$oob"
  grep -q "(exit" "$f" && printf '%-40s %s\n' "$(basename "$f" .log)" "$(grep -m1 '(exit' "$f")"
done
