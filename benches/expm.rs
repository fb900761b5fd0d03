//! Throughput of the matrix exponential and the exponential-times-vector product.
//!
//! `cargo bench --bench expm [-- --matrices N --reps R --n SIZE --tensor-ops]` prints, per CPU
//! backend, forward and forward+backward of `expm` (Padé and Taylor) and forward+backward of
//! `expmv` (T z) through the public API (conversions in and out of Burn tensors included), on
//! [N, n, n] f32 batches whose median 1-norm is about 1.6 and about 10: the setting of
//! `pytorch_anchors.py --only expm`, whose figures belong beside these (same machine, same
//! session). `--tensor-ops` adds the portable tensor-op implementation on NdArray (slow: its
//! pivoted solve is n sequential whole-batch passes; one timed run after a warm-up).
//!
//! First it prints the single-thread kernels (the n x n product, the LU factorisation and its
//! two solves) against which the batch figures read; `--matmul-only` stops there.
//! Then `cpu::expm_into` into a buffer kept across calls (`--only into` runs that alone).
//! `--profile-forward` then times only the Padé forward on NdArray at ~1.6, repeated `--reps`
//! times: the run to put under `perf record`. Like the `vlgo` program, it keeps freed buffers,
//! the 64 MiB batches included, in the heap (`vlgo_core::cpu::host::keep_freed_buffers`);
//! `--default-allocator` leaves glibc's defaults. `--isa avx2` (or `portable`) caps the kernels'
//! instruction set, to measure the AVX2 kernels on an AVX-512 machine.

use std::time::Instant;

use burn::backend::Autodiff;
use burn::prelude::*;
use burn::tensor::Distribution;
use vlgo_core::expm::{forward_flops, tensor_ops};
use vlgo_core::{ExpmBackend, ExpmConfig, ExpmMethod, ExpmvConfig, expm_with, expmv};

struct Args {
    matrices: usize,
    reps: usize,
    n: usize,
    tensor_ops: bool,
}

fn args() -> Args {
    let mut a = Args {
        matrices: 4096,
        reps: 5,
        n: 64,
        tensor_ops: false,
    };
    let argv: Vec<String> = std::env::args().collect();
    for (k, w) in argv.iter().enumerate() {
        let value = || {
            argv.get(k + 1)
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("{w} takes a positive integer"))
        };
        match w.as_str() {
            "--matrices" => a.matrices = value(),
            "--reps" => a.reps = value(),
            "--n" => a.n = value(),
            "--tensor-ops" => a.tensor_ops = true,
            _ => {}
        }
    }
    a
}

/// Median seconds of `reps` runs after one warm-up; `f` must synchronise (read back).
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn matrices<B: Backend>(count: usize, n: usize, norm: f64, device: &B::Device) -> Tensor<B, 3> {
    B::seed(device, 0);
    let a = Tensor::<B, 3>::random([count, n, n], Distribution::Normal(0.0, 1.0), device);
    let norms = a.clone().abs().sum_dim(1).max_dim(2).reshape([count]);
    let mut v = norms.into_data().convert::<f64>().to_vec::<f64>().unwrap();
    v.sort_by(f64::total_cmp);
    a * (norm / v[v.len() / 2])
}

const METHODS: [ExpmMethod; 2] = [ExpmMethod::Pade, ExpmMethod::Taylor];

fn header(name: &str, args: &Args, reps: usize) {
    println!(
        "\n{name}: [{}, {n}, {n}] f32, median of {reps} runs, ms (forward GFLOP/s)",
        args.matrices,
        n = args.n
    );
    println!(
        "| ||A||_1 | expm Padé fwd | expm Taylor fwd | expm Padé fwd+bwd | expm Taylor fwd+bwd | expmv fwd+bwd |"
    );
    println!("|---|---|---|---|---|---|");
}

fn bench_backend<B: ExpmBackend>(name: &str, args: &Args)
where
    Autodiff<B>: ExpmBackend,
{
    let device: B::Device = Default::default();
    header(name, args, args.reps);
    for norm in [1.6, 10.0] {
        let a = matrices::<B>(args.matrices, args.n, norm, &device);
        let up = Tensor::<B, 3>::random(a.dims(), Distribution::Normal(0.0, 1.0), &device);
        let z = Tensor::<B, 2>::random(
            [args.matrices, args.n],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        if norm == 1.6 {
            let s = time(args.reps, || {
                let t = Tensor::<B, 3>::from_data(a.clone().into_data(), &device);
                let _ = t.into_data();
            });
            println!(
                "(a round trip host -> tensor -> host of the batch alone: {:.1} ms)",
                s * 1e3
            );
        }
        let mut row = vec![format!("{norm}")];
        for method in METHODS {
            let cfg = ExpmConfig::new().with_method(method);
            let s = time(args.reps, || {
                let _ = expm_with(a.clone(), &cfg).unwrap().into_data();
            });
            let gflops = forward_flops(&a, method) / s / 1e9;
            row.push(format!("{:.1} ({gflops:.0})", s * 1e3));
        }
        for method in METHODS {
            let cfg = ExpmConfig::new().with_method(method);
            let s = time(args.reps, || {
                let ad = Tensor::<Autodiff<B>, 3>::from_inner(a.clone()).require_grad();
                let t = expm_with(ad.clone(), &cfg).unwrap();
                let mut g = (t * Tensor::from_inner(up.clone())).sum().backward();
                // Handed over, as an optimiser takes it: `grad` would copy it out of the store.
                let _ = ad.grad_remove(&mut g).unwrap().into_data();
            });
            row.push(format!("{:.1}", s * 1e3));
        }
        let s = time(args.reps, || {
            let ad = Tensor::<Autodiff<B>, 3>::from_inner(a.clone()).require_grad();
            let y = expmv(ad.clone(), Tensor::from_inner(z.clone()));
            let mut g = y.sum().backward();
            let _ = ad.grad_remove(&mut g).unwrap().into_data();
        });
        row.push(format!("{:.1}", s * 1e3));
        println!("| {} |", row.join(" | "));
    }
}

/// `cpu::expm_into` into one output buffer kept across calls, against the tensor call whose
/// output is a fresh buffer each time (its pages faulted in anew), Padé at ||A||_1 ~ 1.6.
fn bench_into(args: &Args) {
    use vlgo_core::cpu::{expm_backward_into, expm_into};
    let device = Default::default();
    let a = matrices::<burn::backend::NdArray>(args.matrices, args.n, 1.6, &device);
    let host = a.clone().into_data().to_vec::<f32>().unwrap();
    let grad: Vec<f32> = (0..host.len())
        .map(|k| (k % 7) as f32 * 0.1 - 0.3)
        .collect();
    let mut out = vec![0.0f32; host.len()];
    let method = ExpmMethod::Pade;
    let into = time(args.reps, || {
        expm_into(&host, &mut out, args.n, method).unwrap()
    });
    let backward = time(args.reps, || {
        expm_backward_into(&host, &grad, &mut out, args.n, method).unwrap()
    });
    let tensor = time(args.reps, || {
        let _ = expm_with(a.clone(), &ExpmConfig::new())
            .unwrap()
            .into_data();
    });
    println!(
        "\nexpm_into, Padé, [{}, {n}, {n}], ||A||_1 ~ 1.6, median of {} runs: forward {:.1} ms \
         (the tensor call on NdArray: {:.1} ms), backward alone {:.1} ms",
        args.matrices,
        args.reps,
        into * 1e3,
        tensor * 1e3,
        backward * 1e3,
        n = args.n,
    );
}

fn bench_tensor_ops<B: Backend>(name: &str, args: &Args) {
    let device: B::Device = Default::default();
    let reps = 1;
    header(name, args, reps);
    for norm in [1.6, 10.0] {
        let a = matrices::<B>(args.matrices, args.n, norm, &device);
        let up = Tensor::<B, 3>::random(a.dims(), Distribution::Normal(0.0, 1.0), &device);
        let z = Tensor::<B, 2>::random(
            [args.matrices, args.n],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let ones = Tensor::<B, 2>::ones([args.matrices, args.n], &device);
        let mut row = vec![format!("{norm}")];
        for method in METHODS {
            let s = time(reps, || {
                let _ = tensor_ops::expm(a.clone(), method).into_data();
            });
            let gflops = forward_flops(&a, method) / s / 1e9;
            row.push(format!("{:.1} ({gflops:.1})", s * 1e3));
        }
        for method in METHODS {
            let s = time(reps, || {
                let _ = tensor_ops::expm(a.clone(), method).into_data();
                let _ = tensor_ops::expm_backward(a.clone(), up.clone(), method).into_data();
            });
            row.push(format!("{:.1}", s * 1e3));
        }
        let s = time(reps, || {
            let (_, abar, _) = tensor_ops::expmv_with_backward(
                a.clone(),
                z.clone(),
                ones.clone(),
                &ExpmvConfig::new(),
            );
            let _ = abar.into_data();
        });
        row.push(format!("{:.1}", s * 1e3));
        println!("| {} |", row.join(" | "));
    }
}

/// One core's multiply-add peak in GFLOP/s, measured: independent FMAs on registers only, as
/// wide as the kernels' instruction set (12 chains of 16 or 8 lanes, more than the FMA units'
/// latency times their count on current x86 cores), so nothing but the FMA units limits it.
/// None where the kernels run portable code.
fn fma_peak() -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        const CHAINS: usize = 12;
        const ITERS: usize = 20_000_000;
        macro_rules! chains {
            ($name:ident, $feature:literal, $t:ty, $set1:ident, $fma:ident, $add:ident) => {
                #[target_feature(enable = $feature, enable = "fma")]
                fn $name() -> f32 {
                    let (a, b) = std::hint::black_box(($set1(0.999_9), $set1(1e-7)));
                    let mut acc: [$t; CHAINS] = std::array::from_fn(|i| $set1(i as f32));
                    for _ in 0..ITERS {
                        for x in acc.iter_mut() {
                            *x = $fma(*x, a, b);
                        }
                    }
                    let mut s = acc[0];
                    for x in &acc[1..] {
                        s = $add(s, *x);
                    }
                    type Lanes = [f32; std::mem::size_of::<$t>() / 4];
                    // SAFETY: a vector register of N floats has the size and bits of [f32; N].
                    let lanes: Lanes = unsafe { std::mem::transmute(s) };
                    lanes.iter().sum()
                }
            };
        }
        chains!(
            avx512,
            "avx512f",
            __m512,
            _mm512_set1_ps,
            _mm512_fmadd_ps,
            _mm512_add_ps
        );
        chains!(
            avx2,
            "avx2",
            __m256,
            _mm256_set1_ps,
            _mm256_fmadd_ps,
            _mm256_add_ps
        );
        let lanes = match vlgo_core::cpu::simd::isa() {
            vlgo_core::cpu::simd::Isa::Avx512 => 16,
            vlgo_core::cpu::simd::Isa::Avx2 => 8,
            vlgo_core::cpu::simd::Isa::Portable => return None,
        };
        let s = time(3, || {
            // SAFETY: `isa()` reported the instruction set (and FMA) on this CPU.
            let x = unsafe { if lanes == 16 { avx512() } else { avx2() } };
            std::hint::black_box(x);
        });
        Some((ITERS * CHAINS * lanes * 2) as f64 / s / 1e9)
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// Single-thread throughput of the kernel's n x n product, for comparison with the peak.
fn bench_matmul(n: usize) {
    let a: Vec<f32> = (0..n * n).map(|k| (k % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..n * n).map(|k| (k % 5) as f32 * 0.1).collect();
    let mut c = vec![0.0f32; n * n];
    let reps = 20_000;
    let s = time(3, || {
        for _ in 0..reps {
            vlgo_core::cpu::simd::matmul(&a, &b, &mut c, n, false);
        }
    });
    let gflops = reps as f64 * 2.0 * (n * n * n) as f64 / s / 1e9;
    let share = match fma_peak() {
        Some(peak) => format!(
            " ({:.0} % of one core's FMA peak, {peak:.0} GFLOP/s measured)",
            100.0 * gflops / peak
        ),
        None => String::new(),
    };
    println!(
        "kernel matmul {n}x{n}, one thread: {:.2} us, {gflops:.0} GFLOP/s{share}",
        s / reps as f64 * 1e6
    );
}

/// Single-thread time of the kernel's pivoted LU factorisation (2 n^3 / 3 flops) and of its
/// solves with n right-hand sides (2 n^3 flops; A X = B in the forward, A^T X = B in the
/// backward), for comparison with the product.
fn bench_lu(n: usize) {
    use vlgo_core::cpu::simd::{lu_factor, lu_solve, lu_solve_transposed};
    // Diagonally weak, so that the factorisation exchanges rows.
    let a: Vec<f32> = (0..n * n)
        .map(|k| ((k * 37 % 11) as f32 - 5.0) / 7.0 + if k % (n + 1) == 0 { 0.1 } else { 0.0 })
        .collect();
    let b: Vec<f32> = (0..n * n).map(|k| (k % 5) as f32 * 0.1).collect();
    let (mut u, mut l, mut x, mut tmp) = (a.clone(), vec![0.0; n * n], b.clone(), vec![0.0; n * n]);
    let mut perm = vec![0; n];
    let reps = 10_000;
    let factor = time(3, || {
        for _ in 0..reps {
            u.copy_from_slice(&a);
            lu_factor(&mut u, &mut l, &mut perm, n);
        }
    });
    let solve = time(3, || {
        for _ in 0..reps {
            x.copy_from_slice(&b);
            lu_solve(&u, &l, &perm, &mut x, &mut tmp, n);
        }
    });
    let transposed = time(3, || {
        for _ in 0..reps {
            x.copy_from_slice(&b);
            lu_solve_transposed(&u, &l, &perm, &mut x, &mut tmp, n);
        }
    });
    let cube = (n * n * n) as f64;
    let rate = |flops: f64, s: f64| reps as f64 * flops / s / 1e9;
    println!(
        "kernel LU factor {n}x{n}, one thread: {:.2} us, {:.0} GFLOP/s; solve with {n} right-hand \
         sides: {:.2} us, {:.0} GFLOP/s; transposed: {:.2} us, {:.0} GFLOP/s",
        factor / reps as f64 * 1e6,
        rate(2.0 * cube / 3.0, factor),
        solve / reps as f64 * 1e6,
        rate(2.0 * cube, solve),
        transposed / reps as f64 * 1e6,
        rate(2.0 * cube, transposed),
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--default-allocator") {
        vlgo_core::cpu::host::keep_freed_buffers();
    }
    let args = args();
    if std::env::args().any(|a| a == "--isa") {
        let cap = std::env::args().skip_while(|a| a != "--isa").nth(1);
        let cap = cap.unwrap_or_default().parse();
        let cap = cap.unwrap_or_else(|e| panic!("--isa: {e}"));
        vlgo_core::cpu::simd::limit_isa(cap).unwrap_or_else(|e| panic!("--isa: {e}"));
    }
    println!(
        "CPU kernel instruction set: {:?}",
        vlgo_core::cpu::simd::isa()
    );
    bench_matmul(args.n);
    bench_lu(args.n);
    if std::env::args().any(|a| a == "--matmul-only") {
        return;
    }
    if std::env::args().any(|a| a == "--profile-forward") {
        // Padé forward at ||A||_1 ~ 1.6 only, repeated: a target for `perf record`.
        let device = Default::default();
        let a = matrices::<burn::backend::NdArray>(args.matrices, args.n, 1.6, &device);
        let s = time(args.reps, || {
            let _ = expm_with(a.clone(), &ExpmConfig::new())
                .unwrap()
                .into_data();
        });
        println!("Padé forward, NdArray: {:.1} ms", s * 1e3);
        return;
    }
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if run("into") {
        bench_into(&args);
    }
    #[cfg(feature = "flex")]
    if run("flex") {
        bench_backend::<burn::backend::Flex>("flex (kernel)", &args);
    }
    if run("ndarray") {
        bench_backend::<burn::backend::NdArray>("ndarray (kernel)", &args);
    }
    if args.tensor_ops {
        bench_tensor_ops::<burn::backend::NdArray>(
            "ndarray (tensor ops, one run after a warm-up)",
            &args,
        );
    }
    // The GPU backends have their own benchmark, timed to device synchronisation:
    // `cargo bench -p vlgo-core --bench gpu --features wgpu` (or `cuda`).
}
