#!/usr/bin/env bash
# Installs dependencies, builds chorus and runs all_reduce_perf across local ranks
# (device buffers when a GPU is present, host memory otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j"$(nproc)"
NP=${NP:-2}
# auto: device buffers when this is a GPU build (CUDA found at configure time) and a GPU is visible, else
# host memory. MEM=host or MEM=device forces one. The device path has run on an H100 and an H200 (docs/status.md,
# docs/perf/h100.md).
MEM=${MEM:-auto}
echo "run.sh: $NP local ranks, --mem $MEM"
exec "$BUILD/perf/chorusrun" -n "$NP" "$BUILD/perf/all_reduce_perf" -b 8 -e 64M -f 4 $([ "$MEM" = auto ] || echo --mem "$MEM") "$@"
