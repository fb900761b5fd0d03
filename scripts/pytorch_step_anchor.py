"""PyTorch's SimCLR-MLP training step at CIFAR-10's shape, the anchor of the training benchmark
(scripts/gpu-train.sh): ResNet-18 with the CIFAR stem (width 64, no max-pool), projection head
512 -> 1024 -> 128 with batch norm, InfoNCE at temperature 0.5, AdamW at 3e-3; two views of a
batch of 3 x 32 x 32 images. Prints images per second and the peak device memory.

Usage: python3 scripts/pytorch_step_anchor.py [--device cuda] [--batch 512] [--steps 20]
"""
import argparse
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
    def __init__(self, cin=3, width=64):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(cin, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    net = ResNet18().to(device)
    head = nn.Sequential(nn.Linear(net.dim, 1024), nn.BatchNorm1d(1024), nn.ReLU(), nn.Linear(1024, 128)).to(device)
    opt = torch.optim.AdamW(list(net.parameters()) + list(head.parameters()), lr=3e-3, weight_decay=1e-5)
    x1 = torch.randn(args.batch, 3, 32, 32, device=device)
    x2 = torch.randn(args.batch, 3, 32, 32, device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad()
        info_nce(head(net(x1)), head(net(x2)), 0.5).backward()
        opt.step()

    for _ in range(3):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    dt = (time.perf_counter() - start) / args.steps
    peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if device.type == "cuda" else "n/a"
    print(f"pytorch {torch.__version__} simclr-mlp step, batch {args.batch}, {device}: "
          f"{dt:.4f} s/step, {args.batch / dt:.1f} images/s, peak memory {peak}")


if __name__ == "__main__":
    main()
