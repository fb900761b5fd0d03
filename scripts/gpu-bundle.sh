#!/usr/bin/env bash
# Packs the GPU checks for a machine with a CUDA GPU but no Rust toolchain: vlgo-core's tests built
# for `cuda` (the library's unit tests and the `suite` integration tests, on `Cuda` as
# `--features test-cuda` runs them) and the GPU benchmark, stripped and compressed, with
# scripts/gpu-bench.sh, PyTorch's anchors and a `run.sh` that runs them all. Build here, copy the
# folder to the GPU machine (same CPU architecture, glibc no older than here), run `DIR/run.sh` there.
# Usage: scripts/gpu-bundle.sh [DIR (default target/gpu-bundle)] [path to pytorch_anchors.py]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(realpath -m "${1:-$root/target/gpu-bundle}")"
anchors="$(realpath -m "${2:-$root/../shared/tools/pytorch_anchors.py}")"
cd "$root"

# The test and bench executables that one cargo command builds, from its JSON messages: "kind name
# path" lines (the library's unit tests are kind "lib").
executables() {
  cargo "$@" --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    kind = m.get("target", {}).get("kind", [""])[0]
    if m.get("reason") == "compiler-artifact" and m.get("executable") and kind in ("lib", "test", "bench"):
        print(m["target"]["kind"][0], m["target"]["name"], m["executable"])
'
}
mapfile -t tests < <(executables test -p vlgo-core --features test-cuda --no-run)
mapfile -t benches < <(executables bench -p vlgo-core --bench gpu --features cuda --no-run)

rm -rf "$dir"
mkdir -p "$dir/bin"
pack() { # kind name path: copy as bin/NAME, strip, compress
  local name="$2" path="$3"
  [ "$1" = lib ] && name=unit
  cp "$path" "$dir/bin/$name"
  strip "$dir/bin/$name"
  xz -T0 -6 "$dir/bin/$name"
}
for line in "${tests[@]}" "${benches[@]}"; do
  # shellcheck disable=SC2086 # three words: kind, name, path
  pack $line
done
for want in unit suite gpu; do
  [ -e "$dir/bin/$want.xz" ] || { echo "gpu-bundle: cargo built no '$want' executable" >&2; exit 1; }
done
cp scripts/gpu-bench.sh "$dir/"
if [ -f "$anchors" ]; then
  cp "$anchors" "$dir/"
else
  echo "gpu-bundle: no $anchors; run.sh will skip PyTorch's figures" >&2
fi

cat >"$dir/run.sh" <<'RUN'
#!/usr/bin/env bash
# vlgo's GPU checks on a CUDA machine: the benchmark and PyTorch's anchors (scripts/gpu-bench.sh
# with the packed benchmark), then vlgo-core's unit and suite tests on `Cuda`. Each part's output
# also goes to LOGDIR (default: logs/ beside this script); a part that outlives its limit in
# seconds (VLGO_GPU_STEP_LIMIT, default 420) is stopped and the others still run. Where one call may
# run 10 minutes at most, run `run.sh LOGDIR bench` and `run.sh LOGDIR tests` as two.
# Usage: run.sh [LOGDIR] [bench|tests|all (default)]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
log="$(realpath -m "${1:-$here/logs}")"
what="${2:-all}"
limit="${VLGO_GPU_STEP_LIMIT:-420}"
mkdir -p "$log"
for f in "$here"/bin/*.xz; do
  [ -x "${f%.xz}" ] && continue
  if command -v xz >/dev/null; then
    xz -dkc "$f" >"${f%.xz}"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "${f%.xz}"
  fi
  chmod +x "${f%.xz}"
done
# cudarc opens CUDA's runtime libraries (NVRTC) by name at run time.
cuda="${CUDA_HOME:-/usr/local/cuda}"
for d in "$cuda/lib64" "$cuda/targets/x86_64-linux/lib"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
anchors="$here/pytorch_anchors.py"
failed=0
step() { # name, then the command
  local name="$1"
  shift
  echo "=== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$log/$name.log"
  local rc="${PIPESTATUS[0]}"
  [ "$rc" = 0 ] || { echo "=== $name: exit $rc"; failed=1; }
}
if [ "$what" != tests ]; then
  step bench env VLGO_GPU_BENCH_BIN="$here/bin/gpu" "$here/gpu-bench.sh" "$anchors"
fi
if [ "$what" != bench ]; then
  step unit "$here/bin/unit"
  step suite "$here/bin/suite"
fi
exit "$failed"
RUN
chmod +x "$dir/run.sh"
du -sh "$dir"
ls -l "$dir" "$dir/bin"
