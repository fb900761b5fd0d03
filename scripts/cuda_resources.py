#!/usr/bin/env python3
"""Compiles the kernels' CUDA C++ offline and reports what each launch holds on the multiprocessor.

Input: the directory that `gpu --cuda-source DIR` wrote (one NAME.cu per kernel and kernels.tsv).
Each source goes through NVRTC to PTX with the options of CubeCL's CUDA runtime, then through
`ptxas -v` to machine code, which gives the registers per unit, the stack and the spills; with
the launch's units and dynamic shared memory (from kernels.tsv), the cubes that fit on one
multiprocessor follow. No GPU is needed: NVRTC and ptxas are plain programs.

NVRTC, ptxas and the runtime's headers come from the CUDA toolkit, or from PyPI without one:
    pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12
Usage: cuda_resources.py DIR   (exit status 1 if a kernel does not compile)
"""

import argparse
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

# The sources are generated for an H100 (gpu::CudaTarget::H100), compute capability 9.0.
ARCH = 90
# Per multiprocessor on compute capability 9.0 (as cuda_occupancy.h): registers, in four
# partitions that each hold whole warps, the allocation unit of registers per warp, shared
# memory, shared memory the system keeps per cube, its allocation unit, units and cubes.
REGISTERS = 65536
PARTITIONS = 4
REGISTER_UNIT = 256
SHARED = 233472
SHARED_PER_CUBE = 1024
SHARED_UNIT = 128
UNITS = 2048
CUBES = 32


def toolkit_paths():
    """(libnvrtc, ptxas, include directories) from CUDA_HOME / CUDA_PATH or the pip packages."""
    roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    for root in filter(None, roots):
        libs = sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")))
        ptxas = os.path.join(root, "bin", "ptxas")
        if libs and os.path.exists(ptxas):
            return libs[0], ptxas, [os.path.join(root, "include")]
    try:
        import nvidia.cuda_nvcc
        import nvidia.cuda_nvrtc
        import nvidia.cuda_runtime
    except ImportError:
        sys.exit("no CUDA toolkit: set CUDA_HOME, or pip install nvidia-cuda-nvrtc-cu12 "
                 "nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12")
    nvrtc_dir = list(nvidia.cuda_nvrtc.__path__)[0]
    nvcc_dir = list(nvidia.cuda_nvcc.__path__)[0]
    libs = sorted(glob.glob(os.path.join(nvrtc_dir, "lib", "libnvrtc.so*")))
    libs = [lib for lib in libs if ".alt." not in lib]
    ptxas = os.path.join(nvcc_dir, "bin", "ptxas")
    if not libs or not os.path.exists(ptxas):
        sys.exit(f"no libnvrtc in {nvrtc_dir} or no ptxas in {nvcc_dir}")
    runtime_dir = list(nvidia.cuda_runtime.__path__)[0]
    return libs[0], ptxas, [os.path.join(d, "include") for d in (runtime_dir, nvcc_dir)]


def nvrtc_ptx(nvrtc, source, name, options):
    """PTX of `source`, or raises with NVRTC's log."""
    prog = ctypes.c_void_p()
    check = lambda code, what: code == 0 or sys.exit(f"{name}: NVRTC {what} failed ({code})")
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                   None, None), "create")
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    result = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if result != 0:
        raise RuntimeError(log.value.decode(errors="replace"))
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetPTX(prog, ptx), "PTX")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def ptxas_info(ptxas, ptx_path, arch):
    """(registers, stack bytes, spill store bytes, spill load bytes) from `ptxas -v`."""
    out = subprocess.run([ptxas, f"-arch=sm_{arch}a", "-v", "-o", os.devnull, ptx_path],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    text = out.stderr + out.stdout
    number = lambda pattern: int(m.group(1)) if (m := re.search(pattern, text)) else 0
    return (number(r"Used (\d+) registers"), number(r"(\d+) bytes stack frame"),
            number(r"(\d+) bytes spill stores"), number(r"(\d+) bytes spill loads"))


def cubes_per_multiprocessor(registers, units, shared):
    """(cubes, what limits them) on one multiprocessor of compute capability 9.0."""
    warps = -(-units // 32)
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    shared_alloc = -(-(shared + SHARED_PER_CUBE) // SHARED_UNIT) * SHARED_UNIT
    limits = {
        "registers": PARTITIONS * (REGISTERS // PARTITIONS // per_warp) // warps,
        "shared memory": SHARED // shared_alloc,
        "units": UNITS // units,
        "cubes": CUBES,
    }
    cubes = min(limits.values())
    return cubes, ", ".join(k for k, v in limits.items() if v == cubes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    args = parser.parse_args()
    lib, ptxas, includes = toolkit_paths()
    nvrtc = ctypes.CDLL(lib)
    options = [f"--gpu-architecture=sm_{ARCH}a", "-lineinfo"]
    options += [f"--include-path={d}" for d in includes if os.path.isdir(d)]
    failed = False
    print(f"sm_{ARCH}a, {os.path.basename(lib)}, {ptxas}")
    print(f"{'kernel':<30} {'units':>5} {'shared':>7} {'regs':>4} {'stack':>5} "
          f"{'spills':>9} {'cubes/SM':>8}  limited by")
    with open(os.path.join(args.dir, "kernels.tsv")) as manifest:
        rows = [line.rstrip("\n").split("\t") for line in manifest if line.strip()]
    for name, entry, units, shared in rows:
        units, shared = int(units), int(shared)
        with open(os.path.join(args.dir, f"{name}.cu")) as f:
            source = f.read()
        try:
            ptx = nvrtc_ptx(nvrtc, source, f"{name}.cu", options)
            ptx_path = os.path.join(args.dir, f"{name}.ptx")
            with open(ptx_path, "w") as f:
                f.write(ptx)
            regs, stack, stores, loads = ptxas_info(ptxas, ptx_path, ARCH)
        except RuntimeError as e:
            print(f"{name}: does not compile\n{e}")
            failed = True
            continue
        cubes, limit = cubes_per_multiprocessor(regs, units, shared)
        print(f"{name:<30} {units:>5} {shared:>7} {regs:>4} {stack:>5} "
              f"{stores:>4}/{loads:<4} {cubes:>8}  {limit}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
