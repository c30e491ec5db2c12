#!/usr/bin/env bash
# Installs what chorus needs to build and test on Debian (host-only build; the CUDA and HIP
# backends are optional and detected when their toolchains are present).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PKGS="build-essential cmake pkg-config libgtest-dev iproute2 python3 ${CHORUS_EXTRA_PKGS:-}"
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
