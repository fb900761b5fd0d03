#!/usr/bin/env bash
# Packs the GPU checks for a machine with a CUDA GPU but no Rust toolchain: vlgo-core's unit tests
# and `suite` tests built as `cargo test -p vlgo-core --features test-cuda` builds them (on `Cuda`),
# and the GPU benchmark, stripped and compressed with xz, with scripts/gpu-bench.sh, PyTorch's
# anchors (where found) and a `run.sh` that runs them all. Build here, copy the folder to the GPU
# machine (same CPU architecture, a glibc no older than here's), run `DIR/run.sh` there.
# Usage: scripts/gpu-bundle.sh [DIR (default target/gpu-bundle; emptied first)] [pytorch_anchors.py]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(realpath -m "${1:-$root/target/gpu-bundle}")"
anchors="$(realpath -m "${2:-$root/../shared/tools/pytorch_anchors.py}")"
cd "$root"

# DIR is emptied first: refuse a folder that holds something other than an earlier bundle.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/run.sh" ]; then
  echo "gpu-bundle: $dir is not empty and holds no earlier bundle (run.sh); name another folder" >&2
  exit 1
fi

# The test and bench executables that one cargo command builds, from its JSON messages: "name path"
# lines, the library's unit tests named `unit`. Compiler messages go to stderr as cargo prints them.
executables() {
  cargo "$@" --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-message":
        print(m["message"]["rendered"], end="", file=sys.stderr)
    elif m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kinds = m["target"]["kind"]
        print("unit" if not {"test", "bench"} & set(kinds) else m["target"]["name"], m["executable"])
'
}
# Captured, not read from a process substitution, so that a failed build stops the script here.
tests="$(executables test -p vlgo-core --features test-cuda --no-run)"
benches="$(executables bench -p vlgo-core --bench gpu --features cuda --no-run)"
# The program with CUDA, for the training part.
program="$(cargo build --release --features cuda --bin vlgo --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-message":
        print(m["message"]["rendered"], end="", file=sys.stderr)
    elif m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "vlgo":
        print("vlgo-cuda-program", m["executable"])
')"

rm -rf "$dir"
mkdir -p "$dir/bin"
while read -r name path; do
  cp "$path" "$dir/bin/$name"
  strip "$dir/bin/$name"
  xz -T0 -6 "$dir/bin/$name"
done <<<"$tests
$benches
$program"
for want in unit suite gpu vlgo-cuda-program; do
  [ -e "$dir/bin/$want.xz" ] || { echo "gpu-bundle: cargo built no '$want' executable" >&2; exit 1; }
done
cp scripts/gpu-bench.sh scripts/gpu-train.sh scripts/train_summary.py scripts/synthetic_cifar10.py \
  scripts/pytorch_step_anchor.py "$dir/"
mkdir -p "$dir/configs"
cp configs/cifar10-simclr-mlp.toml configs/cifar10-manifoldclr-mlp.toml "$dir/configs/"
if [ -f "$anchors" ]; then
  cp "$anchors" "$dir/"
else
  echo "gpu-bundle: no $anchors; run.sh will skip PyTorch's figures" >&2
fi

# `bin/with-cuda CMD...` runs CMD with CUDA's libraries on the library path (cudarc opens NVRTC by
# name at run time); `bin/gpu-cuda` is the benchmark so. PyTorch's anchors run without it: a pip
# build of torch brings CUDA libraries of its own.
cat >"$dir/bin/with-cuda" <<'WITH'
#!/usr/bin/env bash
cuda="${CUDA_HOME:-/usr/local/cuda}"
for d in "$cuda/lib64" "$cuda/targets/x86_64-linux/lib"; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH
exec "$@"
WITH
cat >"$dir/bin/gpu-cuda" <<'GPU'
#!/usr/bin/env bash
bin="$(dirname "$0")"
exec "$bin/with-cuda" "$bin/gpu" "$@"
GPU
cat >"$dir/bin/vlgo" <<'VLGO'
#!/usr/bin/env bash
bin="$(dirname "$0")"
exec "$bin/with-cuda" "$bin/vlgo-cuda-program" "$@"
VLGO
chmod +x "$dir/bin/with-cuda" "$dir/bin/gpu-cuda" "$dir/bin/vlgo"

cat >"$dir/run.sh" <<'RUN'
#!/usr/bin/env bash
# vlgo's GPU checks on a CUDA machine: the benchmark and PyTorch's anchors (gpu-bench.sh with the
# packed benchmark), the training figures (gpu-train.sh with the packed program: SimCLR-MLP and
# ManifoldCLR-MLP steps at CIFAR-10's shape, a CIFAR-10-sized epoch, PyTorch's step), then
# vlgo-core's unit and suite tests on `Cuda`. Each part's output also goes to
# LOGDIR/{bench,train,unit,suite}.log (default LOGDIR: logs/ beside this script); a part that outlives
# VLGO_GPU_STEP_LIMIT seconds (default 420) is stopped and the others still run. Where a job on the
# GPU machine is limited in time, run `run.sh LOGDIR bench`, `run.sh LOGDIR train` and
# `run.sh LOGDIR tests` apart.
# Usage: run.sh [LOGDIR] [bench|train|tests|all (default)]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
case "${1:-}" in bench | train | tests | all) set -- "$here/logs" "$1" ;; esac
log="$(realpath -m "${1:-$here/logs}")"
what="${2:-all}"
case "$what" in bench | train | tests | all) ;; *) echo "run.sh: '$what' is not bench, train, tests or all" >&2; exit 2 ;; esac
limit="${VLGO_GPU_STEP_LIMIT:-420}"
mkdir -p "$log"
failed=0
# Unpacked each time, so that a bundle copied over an earlier one never runs the earlier executables.
for f in "$here"/bin/*.xz; do
  exe="${f%.xz}"
  if { command -v xz >/dev/null && xz -dc "$f" >"$exe.tmp"; } ||
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$exe.tmp"; then
    chmod +x "$exe.tmp" && mv "$exe.tmp" "$exe"
  else
    echo "run.sh: could not unpack $f" >&2
    rm -f "$exe.tmp" "$exe"
    failed=1
  fi
done
step() { # name, then the command
  local name="$1"
  shift
  echo "=== $name: $*"
  timeout -k 30 "$limit" "$@" 2>&1 | tee "$log/$name.log"
  local rc="${PIPESTATUS[0]}"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "=== $name: stopped after ${limit} s" | tee -a "$log/$name.log"
    failed=1
  elif [ "$rc" != 0 ]; then
    echo "=== $name: exit $rc" | tee -a "$log/$name.log"
    failed=1
  fi
}
if [ "$what" = bench ] || [ "$what" = all ]; then
  step bench env VLGO_GPU_BENCH_BIN="$here/bin/gpu-cuda" bash "$here/gpu-bench.sh" "$here/pytorch_anchors.py"
fi
if [ "$what" = train ] || [ "$what" = all ]; then
  # Three runs with their kernels compiled, and PyTorch's: a longer limit of its own.
  limit="${VLGO_GPU_TRAIN_LIMIT:-900}" step train env VLGO_BIN="$here/bin/vlgo" bash "$here/gpu-train.sh" "$log/train"
fi
if [ "$what" = tests ] || [ "$what" = all ]; then
  step unit "$here/bin/with-cuda" "$here/bin/unit"
  step suite "$here/bin/with-cuda" "$here/bin/suite"
fi
exit "$failed"
RUN
chmod +x "$dir/run.sh"
du -sh "$dir"
ls -l "$dir" "$dir/bin"
