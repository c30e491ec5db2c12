#!/usr/bin/env bash
# Installs chorus into a temporary prefix, then builds and runs a consumer twice: through
# pkg-config (nccl.pc) and through CMake's find_package(chorus).
# usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
test -L "$tmp/prefix/lib/libnccl.so" || { echo "FAIL: libnccl.so link missing"; ls -l "$tmp/prefix/lib"; exit 1; }
soname=$(objdump -p "$tmp/prefix/lib/libnccl.so.2" | awk '/SONAME/ {print $2}')
[ "$soname" = "libnccl.so.2" ] || { echo "FAIL: SONAME is '$soname'"; exit 1; }
cat > "$tmp/app.c" <<'C'
#include <nccl.h>
#include <stdio.h>
int main(void) {
  ncclComm_t comms[2];
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  if (ncclCommInitAll(comms, 2, NULL) != ncclSuccess) return 1;
  ncclGroupStart();
  ncclAllReduce(a, a, 4, ncclFloat, ncclSum, comms[0], NULL);
  ncclAllReduce(b, b, 4, ncclFloat, ncclSum, comms[1], NULL);
  if (ncclGroupEnd() != ncclSuccess) return 2;
  for (int i = 0; i < 4; i++) if (a[i] != 11.0f * (i + 1) || b[i] != a[i]) return 3;
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
  printf("consumer OK\n");
  return 0;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc "$tmp/app.c" $(pkg-config --cflags --libs nccl) -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/app_pc"
"$tmp/app_pc"
mkdir -p "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(chorus REQUIRED)
add_executable(app ../app.c)
target_link_libraries(app chorus::nccl)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_RPATH="$tmp/prefix/lib" > "$tmp/cm.log"
cmake --build "$tmp/cm/build" > "$tmp/cmb.log"
"$tmp/cm/build/app"
echo "OK: installed library, header, pkg-config file and CMake package all work"
