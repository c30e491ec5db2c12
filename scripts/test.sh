#!/usr/bin/env bash
# Installs dependencies, builds chorus and runs the CPU test suite (ctest label "cpu").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD=${BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest -L cpu --output-on-failure -j2 --timeout 600 "$@"
