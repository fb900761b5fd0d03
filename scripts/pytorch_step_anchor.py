"""PyTorch's SimCLR-MLP training step, the anchor of the training benchmarks.

--shape cifar10 (the default; scripts/gpu-train.sh): ResNet-18 with the CIFAR stem (width 64, no
max-pool), projection head 512 -> 1024 -> 128 with batch norm, InfoNCE at temperature 0.5, AdamW
at 3e-3; two views of a batch of 3 x 32 x 32 images (512 by default).

--shape fashion-mnist: the network of configs/fashion-mnist-simclr-mlp-cpu.toml (width 16, max
pooling after the stem, temperature 0.1) on two views of a batch of 1 x 28 x 28 images (256 by
default), the step that `cargo bench --bench step -- --backend flex --only 28 --width 16
--max-pool --batch 256` times.

Prints images per second and the peak device memory. With --profile (CPU only), the steps run
under torch.profiler instead, and the script prints their wall time under the profiler (which
slows them) and the operators' self time per network stage, in ms per step: the convolutions
(forward and both adjoints) and the batch norms (with the stem's max pooling), then the
element-wise operations (ReLU, its adjoint, additions and multiplications, AdamW's among them)
and the rest (AdamW's other updates, the head's products, the loss). This is the PyTorch side of
the per-stage table in docs/pretrain.md, whose other side is `cargo bench --bench step -- ...
--layer-times`.

Usage: python3 scripts/pytorch_step_anchor.py [--shape cifar10|fashion-mnist] [--device cuda]
       [--batch N] [--steps 20] [--threads N] [--profile]
"""
import argparse
import collections
import contextlib
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = nn.Sequential()
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.sc(x))


class ResNet18(nn.Module):
    def __init__(self, cin=3, width=64, max_pool=False):
        super().__init__()
        w = width
        stem = [nn.Conv2d(cin, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
        if max_pool:
            stem.append(nn.MaxPool2d(3, 2, 1))
        self.stem = nn.Sequential(*stem)
        plan = [(w, 1), (w, 1), (2 * w, 2), (2 * w, 1), (4 * w, 2), (4 * w, 1), (8 * w, 2), (8 * w, 1)]
        layers, c = [], w
        for cout, s in plan:
            layers.append(Block(c, cout, s))
            c = cout
        self.layers = nn.Sequential(*layers)
        self.dim = c

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)


def info_nce(a, b, tau):
    z = F.normalize(torch.cat([a, b]), dim=1)
    s = z @ z.T / tau
    n = a.shape[0]
    s.fill_diagonal_(float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(s, target)


# Per shape: input channels, side, width, max pooling after the stem, temperature, batch.
SHAPES = {
    "cifar10": (3, 32, 64, False, 0.5, 512),
    "fashion-mnist": (1, 28, 16, True, 0.1, 256),
}


def stage_times(prof, steps, cin, side, max_pool):
    """Self CPU time per (kind, stage) in ms per step from the profiler's operators. A stage is
    named by its channels; the stem's convolution reads the input's `cin`
    channels, and its batch norm runs at the input's side only when max pooling follows it
    (without pooling it has the first stage's shape and is counted there)."""

    def stage(channels):
        return f"{channels} channels"

    times = collections.defaultdict(float)
    for e in prof.key_averages(group_by_input_shape=True):
        name, shapes = e.key, e.input_shapes
        ms = e.self_cpu_time_total / 1e3 / steps
        kind, where = "other", ""
        if name in ("aten::mkldnn_convolution", "aten::_slow_conv2d_forward"):
            if shapes and len(shapes) > 1 and len(shapes[1]) == 4:
                kind = "conv"
                where = "stem" if shapes[0][1] == cin else stage(shapes[1][0])
        elif name in ("aten::convolution_backward", "aten::_slow_conv2d_backward"):
            if shapes and len(shapes) > 2 and len(shapes[1]) == 4:
                kind = "conv"
                where = "stem" if shapes[1][1] == cin else stage(shapes[0][1])
        elif name in ("aten::native_batch_norm", "aten::native_batch_norm_backward"):
            kind = "norm"
            dims = shapes[0] if shapes else []
            if len(dims) == 2:
                where = "head"
            elif len(dims) == 4:
                where = "stem" if max_pool and dims[2] == side else stage(dims[1])
        elif name.startswith("aten::max_pool2d"):
            kind, where = "norm", "stem"
        elif name in ("aten::clamp_min", "aten::relu", "aten::relu_", "aten::threshold_backward",
                      "aten::add", "aten::add_", "aten::fill_", "aten::mul", "aten::mul_"):
            kind = "element-wise"
        times[(kind, where)] += ms
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=sorted(SHAPES), default="cifar10")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, help="images per view (512 for cifar10, 256 for fashion-mnist)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, help="CPU threads (PyTorch's default when not given)")
    p.add_argument("--profile", action="store_true", help="per-stage operator times (CPU only)")
    args = p.parse_args()
    device = torch.device(args.device)
    if args.profile and device.type != "cpu":
        p.error("--profile times the CPU operators: use it with --device cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    cin, side, width, max_pool, tau, batch = SHAPES[args.shape]
    batch = args.batch or batch
    torch.manual_seed(0)
    net = ResNet18(cin, width, max_pool).to(device)
    head = nn.Sequential(nn.Linear(net.dim, 1024), nn.BatchNorm1d(1024), nn.ReLU(), nn.Linear(1024, 128)).to(device)
    opt = torch.optim.AdamW(list(net.parameters()) + list(head.parameters()), lr=3e-3, weight_decay=1e-5)
    x1 = torch.randn(batch, cin, side, side, device=device)
    x2 = torch.randn(batch, cin, side, side, device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad()
        info_nce(head(net(x1)), head(net(x2)), tau).backward()
        opt.step()

    for _ in range(3):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        def profiled():
            return profile(activities=[ProfilerActivity.CPU], record_shapes=True)

        # The profiler's first steps run slow (its own set-up): two steps under a discarded one.
        with profiled():
            step()
            step()
        timed = profiled()
    else:
        timed = contextlib.nullcontext()
    with timed as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        dt = (time.perf_counter() - start) / args.steps
    if args.profile:
        times = stage_times(prof, args.steps, cin, side, max_pool)
        total = sum(times.values())
        print(f"pytorch {torch.__version__} simclr-mlp step, {args.shape}, batch {batch}, "
              f"{torch.get_num_threads()} threads, under the profiler: {dt * 1e3:.1f} ms/step, "
              f"operators' self time {total:.1f} ms/step")
        print("| kind | stage | ms per step | share |")
        print("|---|---|---|---|")
        for (kind, where), ms in sorted(times.items()):
            print(f"| {kind} | {where} | {ms:.2f} | {100 * ms / total:.1f} % |")
        return
    peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if device.type == "cuda" else "n/a"
    print(f"pytorch {torch.__version__} simclr-mlp step, {args.shape}, batch {batch}, {device}: "
          f"{dt:.4f} s/step, {batch / dt:.1f} images/s, peak memory {peak}")


if __name__ == "__main__":
    main()
