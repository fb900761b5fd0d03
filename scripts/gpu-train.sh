#!/usr/bin/env bash
# The training figures of docs/backends.md on a machine with a CUDA GPU, in one command:
#   - SimCLR-MLP and ManifoldCLR-MLP steps at CIFAR-10's shape (configs/cifar10-simclr-mlp.toml,
#     configs/cifar10-manifoldclr-mlp.toml: ResNet-18 width 64, 3 x 32 x 32, batch 512) with
#     `vlgo --backend cuda`: images per second (median over the steps after the first few) and
#     the peak device memory in use (nvidia-smi, sampled every 100 ms);
#   - one CIFAR-10-sized epoch of SimCLR-MLP end to end (50,000 synthetic images, augmentation and
#     data included);
#   - PyTorch's SimCLR-MLP step on the same card (scripts/pytorch_step_anchor.py).
# Writes OUTDIR/train.md with the table and keeps the runs' folders beside it.
# Usage: scripts/gpu-train.sh [OUTDIR (default target/gpu-train)]
#   VLGO_BIN       the vlgo executable (default: built here with `--features cuda`)
#   VLGO_BACKEND   the backend (default cuda); `flex` runs the same part on the CPU
#   VLGO_TRAIN_SET extra `KEY=VALUE` settings for every run (a dry run on the CPU:
#                  "pretrain.model.width=4 pretrain.batch_size=32")
#   VLGO_TRAIN_IMAGES  images of the epoch run (default 50000)
#   VLGO_TORCH     a python with torch for the anchor (default python3; skipped without CUDA)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(realpath -m "${1:-$here/../target/gpu-train}")"
backend="${VLGO_BACKEND:-cuda}"
images="${VLGO_TRAIN_IMAGES:-50000}"
torch="${VLGO_TORCH:-python3}"
# Beside this script in a bundle, one folder up in the repository.
configs="$here/configs"
[ -d "$configs" ] || configs="$here/../configs"
bin="${VLGO_BIN:-}"
if [ -z "$bin" ]; then
  (cd "$here/.." && cargo build --release --features cuda --bin vlgo) || exit 1
  bin="$(cd "$here/.." && realpath -m "${CARGO_TARGET_DIR:-target}/release/vlgo")"
fi
sets=()
for s in ${VLGO_TRAIN_SET:-}; do sets+=(--set "$s"); done

mkdir -p "$out"
rm -rf "$out/runs"
failed=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# The step runs see 24 batches; evaluation at the end is cut to the least the program allows.
batch="$(grep -m1 '^batch_size' "$configs/cifar10-simclr-mlp.toml" | tr -dc 0-9)"
for s in ${VLGO_TRAIN_SET:-}; do
  case "$s" in pretrain.batch_size=*) batch="${s#*=}" ;; esac
done
python3 "$here/synthetic_cifar10.py" "$out/steps-data" "$((24 * batch))" 1000 || exit 1
python3 "$here/synthetic_cifar10.py" "$out/epoch-data" "$images" 1000 || exit 1

# Peak memory of the GPU while COMMAND runs, less what was in use before it started (MiB).
peak_of() {
  local log="$1"
  shift
  if command -v nvidia-smi >/dev/null; then
    # Card 0, the program's default device. This is what the driver sees in use (the CUDA
    # context and the allocator's pools included), not PyTorch's max_memory_allocated.
    nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$log.mem" &
    local sampler=$!
    sleep 0.5
    "$@"
    local rc=$?
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    return "$rc"
  fi
  "$@"
}
run() { # name, config, data, then settings
  local name="$1" config="$2" data="$3"
  shift 3
  echo "== $name"
  peak_of "$out/runs/$name" "$bin" --backend "$backend" pretrain --config "$configs/$config" \
    --data-dir "$data" --out "$out/runs/$name" --set pretrain.epochs=1 --set knn_every=0 \
    --set baselines=false --set probe.epochs=1 --set pretrain.warmup_epochs=0 ${sets[@]+"${sets[@]}"} "$@" \
    >"$out/$name.log" 2>&1 ||
    { echo "== $name failed (exit $?): see $out/$name.log"; tail -5 "$out/$name.log"; failed=1; }
}
# OUTDIR/train.md from the runs so far (written after each, so a stopped part keeps its figures).
summarise() { python3 "$here/train_summary.py" "$out" "$backend"; }
mkdir -p "$out/runs"
run simclr-mlp-steps cifar10-simclr-mlp.toml "$out/steps-data"
summarise
# Best-of-20 from the first step, as every step after the config's best_of_j_from (5000) runs.
run manifoldclr-mlp-steps cifar10-manifoldclr-mlp.toml "$out/steps-data" \
  --set pretrain.model.manifold.best_of_j_from=0
summarise
run simclr-mlp-epoch cifar10-simclr-mlp.toml "$out/epoch-data"
summarise
if "$torch" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  "$torch" "$here/pytorch_step_anchor.py" --device cuda --batch "$batch" | tee "$out/pytorch.log" ||
    failed=1
else
  echo "PyTorch's anchor skipped: no torch with CUDA for $torch" | tee "$out/pytorch.log"
fi

summarise || failed=1
exit "$failed"
