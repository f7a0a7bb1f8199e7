#!/usr/bin/env bash
# Installs what the `ib` feature needs to build rdma-core's libibverbs (ibverbs-sys): cmake, libnl, clang.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v clang >/dev/null || need+=(clang libclang-dev)
pkg-config --exists libnl-3.0 2>/dev/null || need+=(libnl-3-dev)
pkg-config --exists libnl-route-3.0 2>/dev/null || need+=(libnl-route-3-dev)
# ibverbs-sys 0.3.2 runs bindgen with -I$OUT_DIR/include, which its cmake build (no install step) never makes, so
# verbs.h finds <infiniband/verbs_api.h> only among the system's headers.
[ -f /usr/include/infiniband/verbs_api.h ] || need+=(libibverbs-dev)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
