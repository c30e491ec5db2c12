#!/usr/bin/env bash
# Everything issue-level GPU verification needs, in one command for a machine with a GPU (the device tool's
# H100: CUDA, CMake, ninja and PyTorch, no Debian packages). Logs go to $OUT (default out/gpu).
#   Here, once:   bash scripts/gpu_session.sh --fetch-deps   (downloads libgtest-dev into .gpu-carry/)
#   There:        bash scripts/gpu_session.sh                (carry .gpu-carry)
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
if [ "${1:-}" = "--fetch-deps" ]; then
  mkdir -p "$CARRY" && (cd "$CARRY" && apt-get download libgtest-dev googletest) && ls "$CARRY"
  exit 0
fi
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
BUILD=${BUILD_DIR:-build-gpu}
log() { echo "== $*" | tee -a "$OUT/session.log"; }
log "date $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
PREFIX=""
if ls "$CARRY"/*.deb >/dev/null 2>&1; then
  for d in "$CARRY"/*.deb; do dpkg -x "$d" "$CARRY/root"; done
  PREFIX="-DCMAKE_PREFIX_PATH=$PWD/$CARRY/root/usr"
fi
GEN=""
command -v ninja >/dev/null && GEN="-G Ninja"
log "configure + build (CUDA sm_90)"
{ time cmake -S . -B "$BUILD" $GEN -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA=ON -DCHORUS_CUDA_ARCHS=90 $PREFIX \
    && time cmake --build "$BUILD" -j"$(nproc)"; } > "$OUT/build.log" 2>&1 || { log "build failed"; tail -30 "$OUT/build.log"; exit 1; }
log "gpu tests"
(cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 300) > "$OUT/ctest-gpu.log" 2>&1; tail -5 "$OUT/ctest-gpu.log"
log "HBM roofline (device-to-device copy, torch)"
python3 - > "$OUT/roofline.txt" 2>&1 <<'PY'
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
cat "$OUT/roofline.txt"
# Several ranks on the one GPU: one process with -g ranks (their kernels run concurrently). Separate processes
# time-slice the GPU without MPS (docs/device_path.md), so they get one small run to show that they work.
for np in 2 4 8; do
  for t in all_reduce all_gather reduce_scatter alltoall; do
    log "$t g=$np"
    timeout 300 "$BUILD/perf/${t}_perf" -g "$np" -b 8 -e 256M -f 4 --mem device \
      > "$OUT/${t}_g${np}.log" 2>&1; tail -4 "$OUT/${t}_g${np}.log"
  done
done
log "all_reduce, 2 processes through IPC"
timeout 300 "$BUILD/perf/chorusrun" -n 2 "$BUILD/perf/all_reduce_perf" -b 8 -e 16M -f 8 --mem device \
  > "$OUT/all_reduce_n2_processes.log" 2>&1; tail -4 "$OUT/all_reduce_n2_processes.log"
log "latency 8 B - 64 KiB, 1 rank: chorus vs NVIDIA NCCL (PyTorch's) with the same tool"
"$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 64K -f 2 --mem device > "$OUT/latency_chorus_g1.log" 2>&1
NV=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
if [ -n "$NV" ] && [ -f "$NV" ]; then
  LD_PRELOAD="$NV" "$BUILD/perf/all_reduce_perf" -g 1 -b 8 -e 64K -f 2 --mem device > "$OUT/latency_nvidia_g1.log" 2>&1
else
  log "NVIDIA NCCL library not found next to PyTorch"
fi
log "PyTorch under LD_PRELOAD of chorus"
LD_PRELOAD="$PWD/$BUILD/libnccl.so.2" timeout 300 python3 tests/gpu/torch_check.py > "$OUT/torch_check.log" 2>&1
tail -4 "$OUT/torch_check.log"
log "done"
