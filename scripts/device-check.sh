#!/usr/bin/env bash
# GPU device check, under 5 minutes on one GPU (e.g. an H200 with the CUDA driver).
#
#   bash scripts/device-check.sh            # from a checkout: builds with `cuda` when cargo exists
#   COLLSCOPE_BIN=/path/to/collscope COLLSCOPE_TEST_BIN=/path/to/collscope_runtime-<hash> bash scripts/device-check.sh
#                                           # no Rust toolchain there: carry prebuilt binaries, made with
#                                           #   cargo build --release --bin collscope
#                                           #   cargo test --release -p collscope-runtime --lib --no-run   (prints the test binary)
#
# Steps: driver and GPU facts, GPU kernels against the CPU kernels (every datatype and op), the shared-GPU
# AllReduce test, then `collscope perf all_reduce --memory gpu` with 2 and 4 ranks on GPU 0
# (COLLSCOPE_ALLOW_SHARED_GPU=1), which prints throughput and per-iteration GPU times from CUDA events.
# Needs libcuda.so and libnvrtc.so (CUDA 12.x) on the library path.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_DEBUG=${NCCL_DEBUG:-INFO} COLLSCOPE_ALLOW_SHARED_GPU=1
start=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - start ))s)"; }

step "driver"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi not found"
ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc\.so' || echo "warning: libcuda/libnvrtc not in the ldconfig cache; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

BIN=${COLLSCOPE_BIN:-}
TEST_BIN=${COLLSCOPE_TEST_BIN:-}
if [ -z "$BIN" ] && command -v cargo >/dev/null; then
  step "build (release, feature cuda)"
  timeout 240 cargo build --release --bin collscope
  BIN="$(realpath -m "${CARGO_TARGET_DIR:-target}")/release/collscope"
  step "GPU kernels vs CPU kernels, shared-GPU AllReduce"
  timeout 240 cargo test --release -p collscope-runtime --lib cuda:: -- --nocapture
elif [ -n "$TEST_BIN" ]; then
  step "GPU kernels vs CPU kernels, shared-GPU AllReduce (prebuilt tests)"
  timeout 120 "$TEST_BIN" cuda:: --nocapture
fi
[ -n "$BIN" ] || { echo "no cargo and no COLLSCOPE_BIN: nothing to run"; exit 2; }

for n in 2 4; do
  step "perf all_reduce on device buffers, $n ranks on GPU 0"
  COLLSCOPE_GPUS=$(printf '0%.0s,' $(seq "$n") | sed 's/,$//') \
    timeout 90 "$BIN" perf all_reduce --memory gpu --nranks "$n" -b 8M -e 256M -f 4 -n 20 -w 5
done
step "done"
