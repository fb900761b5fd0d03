"""The PyTorch baseline of `vlgo semisup --bench`: the same semi-supervised loop (pseudo-label
method: a labelled and an unlabelled forward pass, the confident pseudo-label term, one backward,
AdamW, the weights' moving average) on the same synthetic 128-d features, in iterations per
second.

    python3 -m venv .venv-torch && .venv-torch/bin/pip install torch   # once
    .venv-torch/bin/python scripts/semisup_bench_pytorch.py --threads 2 --iterations 200
"""

import argparse
import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--classes", type=int, default=10)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d, c = args.dim, args.classes
    centres = torch.randn(c, d)
    labels = torch.arange(60_000) % c
    z = centres[labels] + torch.randn(60_000, d)
    labelled = torch.cat([torch.nonzero(labels == k)[:5, 0] for k in range(c)])
    zl_all, yl_all = z[labelled], labels[labelled]

    def run(iterations):
        clf = nn.Sequential(nn.Linear(d, args.hidden), nn.LeakyReLU(), nn.Linear(args.hidden, c))
        ema = copy.deepcopy(clf)
        for q in ema.parameters():
            q.requires_grad_(False)
        opt = torch.optim.AdamW(clf.parameters(), lr=5e-4, weight_decay=5e-4)
        for _ in range(iterations):
            li = torch.randperm(len(zl_all))[:32]
            ui = torch.randint(0, len(z), (480,))
            zl, yl, zu = zl_all[li], yl_all[li], z[ui]
            loss = F.cross_entropy(clf(zl), yl)
            logits_u = clf(zu)
            q = torch.softmax(logits_u.detach(), -1)
            conf, pseudo = q.max(-1)
            mask = conf >= 0.95
            if mask.any():
                loss = loss + F.cross_entropy(logits_u[mask], pseudo[mask], reduction="sum") / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for a, w in zip(ema.parameters(), clf.parameters()):
                    a.mul_(0.999).add_(w, alpha=0.001)

    run(5)
    start = time.perf_counter()
    run(args.iterations)
    secs = time.perf_counter() - start
    print(
        f"pytorch {torch.__version__}, {args.threads} threads: {args.iterations / secs:.1f} "
        f"iterations/s ({secs:.2f} s for {args.iterations})"
    )


if __name__ == "__main__":
    main()
