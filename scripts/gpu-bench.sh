#!/usr/bin/env bash
# The GPU figures of docs/expm.md in one command, on a machine with a CUDA GPU:
#   our kernels at [4096, 64, 64] with the tensor-op path beside them, at [81920, 64, 64]
#   (best-of-20 at batch 512 with 8 blocks), best-of-100 at batch 512 / M = 128 / 8 blocks with
#   both transport methods, then PyTorch's matrix_exp on the same card where torch is installed.
#   A run that fails is reported and the others still run.
# Usage: scripts/gpu-bench.sh [path to pytorch_anchors.py]
#   With VLGO_GPU_BENCH_BIN naming a built benchmark (as scripts/gpu-bundle.sh packs it for a
#   machine without Rust), that executable runs instead of cargo.
set -uo pipefail
anchors="$(realpath -m "${1:-$(dirname "$0")/../../shared/tools/pytorch_anchors.py}")"
bench_bin="${VLGO_GPU_BENCH_BIN:+$(realpath -m "$VLGO_GPU_BENCH_BIN")}"
cd "$(dirname "$0")/.."

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
if [ -n "$bench_bin" ] && [ ! -x "$bench_bin" ]; then
  echo "gpu-bench: VLGO_GPU_BENCH_BIN=$bench_bin is not an executable" >&2
  exit 1
fi
# Build once, so that each timed run below starts at once.
[ -n "$bench_bin" ] || cargo bench -p vlgo-core --bench gpu --features cuda --no-run || exit 1
failed=0
run() {
  echo "== $*"
  "$@" || { echo "== failed (exit $?): $*"; failed=1; }
}
bench() {
  if [ -n "$bench_bin" ]; then
    run "$bench_bin" --bench --only cuda "$@"
  else
    run cargo bench -q -p vlgo-core --bench gpu --features cuda -- --only cuda "$@"
  fi
}
bench --tensor-ops
# The backward that recomputes the Taylor scheme, against the default one from the forward's
# checkpoint (the run above).
echo "== VLGO_GPU_CHECKPOINT=0"
VLGO_GPU_CHECKPOINT=0 bench
bench --matrices 81920 --reps 3
bench --best-of 100 --reps 3

if [ -f "$anchors" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  run python3 "$anchors" --only expm --device cuda --matrices 4096
  run python3 "$anchors" --only expm --device cuda --matrices 81920 --reps 3
else
  echo "PyTorch anchors skipped: no $anchors, or no torch with CUDA"
fi
exit "$failed"
