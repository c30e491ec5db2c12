#!/usr/bin/env bash
# Installs what chorus needs to build and test on Debian: the host build's packages and the HIP toolchain (Debian's
# hipcc and libamdhip64-dev, for the HIP build; nothing HIP runs without an AMD GPU). The CUDA toolkit is not a
# Debian package here: the CUDA build uses nvcc where it is installed (/usr/local/cuda) and is skipped elsewhere.
# ccache lets scripts/test.sh compile a source that is the same in the three builds once.
# CHORUS_NO_HIP=1 leaves the HIP packages out.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PKGS="build-essential cmake ninja-build ccache pkg-config libgtest-dev libhwloc-dev libucx-dev libibverbs-dev iproute2 python3 ${CHORUS_EXTRA_PKGS:-}"
if [ "${CHORUS_NO_HIP:-0}" != "1" ]; then PKGS="$PKGS hipcc libamdhip64-dev"; fi
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q $missing
else
  echo "deps.sh: all packages present ($PKGS)"
fi
