"""Writes a CIFAR-10-format folder of random images (data_batch_1..5.bin, test_batch.bin), for
timing a training epoch at the real data's size where the real files are not at hand.

Usage: python3 scripts/synthetic_cifar10.py DIR [TRAIN (default 50000)] [TEST (default 10000)]
"""
import os
import sys

RECORD = 1 + 3 * 32 * 32


def write(path, count):
    with open(path, "wb") as f:
        left = count
        while left:
            n = min(left, 1000)
            pixels = os.urandom(n * (RECORD - 1))
            labels = os.urandom(n)
            for i in range(n):
                f.write(bytes([labels[i] % 10]))
                f.write(pixels[i * (RECORD - 1):(i + 1) * (RECORD - 1)])
            left -= n


def main():
    out = sys.argv[1]
    train = int(sys.argv[2]) if len(sys.argv) > 2 else 50000
    test = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    os.makedirs(out, exist_ok=True)
    per = [train // 5 + (1 if i < train % 5 else 0) for i in range(5)]
    for i, n in enumerate(per):
        write(os.path.join(out, f"data_batch_{i + 1}.bin"), n)
    write(os.path.join(out, "test_batch.bin"), test)
    print(f"synthetic CIFAR-10: {train} train and {test} test images in {out}")


if __name__ == "__main__":
    main()
