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
# The perf tools use device buffers when a GPU is present; chorus has no GPU backend yet and
# refuses device buffers, so host memory is used everywhere until it does (docs/status.md).
MEM=${MEM:-host}
echo "run.sh: $NP local ranks, $MEM buffers (chorus's GPU backend is not written yet)"
exec "$BUILD/perf/chorusrun" -n "$NP" "$BUILD/perf/all_reduce_perf" -b 8 -e 64M -f 4 --mem "$MEM" "$@"
