"""OUTDIR/train.md from the runs of scripts/gpu-train.sh so far: per run the steps, the median
images/s after the first four steps, the epoch's train_seconds and the peak device memory, then
PyTorch's step and the ratios.

Usage: python3 scripts/train_summary.py OUTDIR BACKEND
"""
import json, os, re, statistics, sys
out, backend = sys.argv[1], sys.argv[2]
rows = []
def peak(name):
    path = os.path.join(out, "runs", name + ".mem")
    try:
        used = [int(v) for v in open(path).read().split() if v.isdigit()]
    except OSError:
        return "n/a"
    return f"{max(used) - used[0]} MiB" if used else "n/a"
steps = {}
for name in ("simclr-mlp-steps", "manifoldclr-mlp-steps", "simclr-mlp-epoch"):
    run = os.path.join(out, "runs", name)
    try:
        log = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
        summary = json.load(open(os.path.join(run, "summary.json")))
    except (OSError, ValueError):
        rows.append(f"| {name} | failed | | | |")
        continue
    later = [s["images_per_second"] for s in log if s.get("step", 0) > 4] or \
        [s["images_per_second"] for s in log]
    rate = statistics.median(later)
    steps[name] = rate
    rows.append(f"| {name} | {len(log)} | {rate:.1f} | {summary.get('train_seconds', float('nan')):.1f} s | {peak(name)} |")
try:
    torch_line = open(os.path.join(out, "pytorch.log")).read().strip()
except OSError:
  torch_line = "not run yet"
m = re.search(r"([0-9.]+) images/s", torch_line)
lines = [f"# Training at CIFAR-10's shape, backend {backend}", "",
         "| run | steps | images/s (median) | epoch time (train_seconds) | peak device memory |",
         "|---|---|---|---|---|", *rows, "", f"PyTorch: {torch_line}"]
if m and "simclr-mlp-steps" in steps:
    lines.append(f"SimCLR-MLP against PyTorch: {steps['simclr-mlp-steps'] / float(m.group(1)):.2f}x its images/s")
if "simclr-mlp-steps" in steps and "manifoldclr-mlp-steps" in steps:
    lines.append(f"ManifoldCLR-MLP step time: {steps['simclr-mlp-steps'] / steps['manifoldclr-mlp-steps']:.2f}x SimCLR-MLP's")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "train.md"), "w").write(text)
print(text)
