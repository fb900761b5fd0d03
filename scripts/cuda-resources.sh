#!/usr/bin/env bash
# Registers, spills and cubes per multiprocessor of every interpreter kernel on an H100 (sm_90),
# without a GPU: CubeCL writes the kernels' CUDA C++ as the launches would compile it (through
# software Vulkan where there is no GPU), then NVRTC and ptxas compile it as the CUDA runtime
# would. Needs Mesa's Vulkan driver where there is no GPU, and NVRTC with ptxas (a CUDA
# toolkit, or: pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12).
# CubeCL's C++ differs from one process to the next (the order of its declarations and of the
# shared arrays), and ptxas's register count with it: RUNS generates and compiles it that many
# times.
# Usage: scripts/cuda-resources.sh [matrix size, default 64] [RUNS, default 1]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-64}"
runs="${2:-1}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
for _ in $(seq "$runs"); do
  dir="$(mktemp -d)"
  cargo bench -q -p vlgo-core --bench gpu --features wgpu,cuda -- --cuda-source "$dir" --n "$n" >/dev/null
  python3 scripts/cuda_resources.py "$dir"
  rm -rf "$dir"
done
