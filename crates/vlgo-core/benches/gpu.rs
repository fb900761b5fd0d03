//! The exponential on a GPU backend: the CubeCL kernels, and the tensor-op path on the same card.
//!
//! `cargo bench -p vlgo-core --bench gpu --features cuda [-- --matrices N --reps R --n SIZE
//! --tensor-ops]` (or `--features wgpu`). Inputs as the CPU benchmark and `pytorch_anchors.py
//! --only expm --device cuda`: [N, n, n] f32 with median 1-norm about 1.6 and about 10. Each
//! figure is the median of R runs after a warm-up, timed to device synchronisation without
//! reading the result back (as the PyTorch anchor does). On `cuda` each cell also shows the
//! memory pool's reservation after the measured work (the pool is emptied before it), the
//! nearest figure to a peak that the runtime offers. `--matrices 81920` is the best-of-20 shape
//! at batch 512 with 8 blocks.
//!
//! `--best-of J` runs best-of-J sampling instead (`vlgo_core::best_of_j_with`, with the draws of
//! `best_of_j_seeded`) at batch 512 with M = 128 generators of 8 blocks of 64 x 64 on d = 512
//! features: seconds for the J candidates and, on `cuda`, the pool's reservation afterwards (the
//! acceptance check is J = 100 within one card's memory), once with the candidates' generators
//! formed by a matmul
//! (`TransportMethod::Expmv`, the default) and once formed inside the kernel
//! (`TransportMethod::Generated`); then one candidate's transport both ways, for dense and
//! half-zero coefficients.
//!
//! `--cuda-source DIR` (with `--features wgpu,cuda`; no CUDA device needed) writes the CUDA C++
//! of the interpreter kernels at `--n` as the launches on an H100 would compile it, one
//! `NAME.cu` per kernel and program table, and `kernels.tsv` (name, entry point, units per cube,
//! bytes of shared memory): the input of `scripts/cuda-resources.sh`.

use std::time::Instant;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
use burn::{backend::Autodiff, prelude::*, tensor::Distribution};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use vlgo_core::expm::{forward_flops, tensor_ops};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
use vlgo_core::{
    ExpmBackend, ExpmConfig, ExpmMethod, ExpmvConfig, expm_with, expmv, expmv_generated, expmv_with,
};

struct Args {
    matrices: usize,
    reps: usize,
    n: usize,
    tensor_ops: bool,
    best_of: usize,
}

fn args() -> Args {
    let mut a = Args {
        matrices: 4096,
        reps: 5,
        n: 64,
        tensor_ops: false,
        best_of: 0,
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
            "--best-of" => a.best_of = value(),
            _ => {}
        }
    }
    a
}

/// Median seconds of `reps` runs after one warm-up; `f` must synchronise.
#[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Reads the runtime's memory pool: (bytes in use, bytes reserved); `true` empties it first.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
type MemoryProbe<B> = fn(&burn::tensor::Device<B>, bool) -> Option<(u64, u64)>;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn matrices<B: Backend>(count: usize, n: usize, norm: f64, device: &B::Device) -> Tensor<B, 3> {
    B::seed(device, 0);
    let a = Tensor::<B, 3>::random([count, n, n], Distribution::Normal(0.0, 1.0), device);
    let norms = a.clone().abs().sum_dim(1).max_dim(2).reshape([count]);
    let mut v = norms.into_data().convert::<f64>().to_vec::<f64>().unwrap();
    v.sort_by(f64::total_cmp);
    a * (norm / v[v.len() / 2])
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn bench<B: ExpmBackend>(name: &str, args: &Args, memory: Option<MemoryProbe<B>>)
where
    Autodiff<B>: ExpmBackend,
{
    const METHODS: [ExpmMethod; 2] = [ExpmMethod::Pade, ExpmMethod::Taylor];
    let device: B::Device = Default::default();
    let sync = || B::sync(&device).expect("the device finishes its queue");
    // Runs `f` once more between two reads of the pool.
    let pool = |f: &dyn Fn()| -> String {
        let Some(probe) = memory else {
            return String::new();
        };
        probe(&device, true);
        f();
        probe(&device, false)
            .map(|(_, reserved)| format!(" [{:.0}]", reserved as f64 / 1048576.0))
            .unwrap_or_default()
    };
    println!(
        "\n{name}: [{}, {n}, {n}] f32, median of {} runs, ms (forward GFLOP/s) [pool MiB]",
        args.matrices,
        args.reps,
        n = args.n
    );
    println!(
        "| ||A||_1 | path | expm Padé fwd | expm Taylor fwd | expm Padé fwd+bwd | expm Taylor fwd+bwd | expmv fwd | expmv fwd+bwd |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for norm in [1.6, 10.0] {
        let a = matrices::<B>(args.matrices, args.n, norm, &device);
        let up = Tensor::<B, 3>::random(a.dims(), Distribution::Normal(0.0, 1.0), &device);
        let z = Tensor::<B, 2>::random(
            [args.matrices, args.n],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        sync();
        let mut row = vec![format!("{norm}"), "kernel".to_string()];
        for method in METHODS {
            let cfg = ExpmConfig::new().with_method(method);
            let run = || {
                let _t = expm_with(a.clone(), &cfg).unwrap();
                sync();
            };
            let s = time(args.reps, run);
            let gflops = forward_flops(&a, method) / s / 1e9;
            row.push(format!("{:.2} ({gflops:.0}){}", s * 1e3, pool(&run)));
        }
        for method in METHODS {
            let cfg = ExpmConfig::new().with_method(method);
            let run = || {
                let ad = Tensor::<Autodiff<B>, 3>::from_inner(a.clone()).require_grad();
                let t = expm_with(ad.clone(), &cfg).unwrap();
                let g = (t * Tensor::from_inner(up.clone())).sum().backward();
                let _g = ad.grad(&g).unwrap();
                sync();
            };
            let s = time(args.reps, run);
            row.push(format!("{:.2}{}", s * 1e3, pool(&run)));
        }
        let run = || {
            let _y = expmv(a.clone(), z.clone());
            sync();
        };
        let s = time(args.reps, run);
        row.push(format!("{:.2}{}", s * 1e3, pool(&run)));
        let run = || {
            let ad = Tensor::<Autodiff<B>, 3>::from_inner(a.clone()).require_grad();
            let y = expmv(ad.clone(), Tensor::from_inner(z.clone()));
            let g = y.sum().backward();
            let _g = ad.grad(&g).unwrap();
            sync();
        };
        let s = time(args.reps, run);
        row.push(format!("{:.2}{}", s * 1e3, pool(&run)));
        println!("| {} |", row.join(" | "));
        if args.tensor_ops {
            let mut row = vec![format!("{norm}"), "tensor ops".to_string()];
            for method in METHODS {
                let run = || {
                    let _t = tensor_ops::expm(a.clone(), method);
                    sync();
                };
                let s = time(args.reps, run);
                let gflops = forward_flops(&a, method) / s / 1e9;
                row.push(format!("{:.2} ({gflops:.0})", s * 1e3));
            }
            for method in METHODS {
                let run = || {
                    let _t = tensor_ops::expm(a.clone(), method);
                    let _g = tensor_ops::expm_backward(a.clone(), up.clone(), method);
                    sync();
                };
                row.push(format!("{:.2}", time(args.reps, run) * 1e3));
            }
            row.push("(same as kernel)".to_string());
            row.push("(same as kernel)".to_string());
            println!("| {} |", row.join(" | "));
        }
    }
}

/// Best-of-J sampling at batch 512, M = 128, 8 blocks of 64 (d = 512), J = `args.best_of`.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn best_of<B: ExpmBackend>(name: &str, args: &Args, memory: Option<MemoryProbe<B>>) {
    use vlgo_core::{
        FixedPrior, LaplaceParams, LieOperatorsConfig, NoiseStreams, OperatorForm, Threshold,
        TransportMethod, best_of_j_with,
    };
    let (batch, m, d, block) = (512, 128, 512, 64);
    let device: B::Device = Default::default();
    let operators = LieOperatorsConfig::new(m, d)
        .with_form(OperatorForm::BlockDiagonal(block))
        .init::<B>(&device)
        .expect("a valid dictionary");
    let params = LaplaceParams::<B>::fixed(&FixedPrior::default(), [batch, m], &device)
        .expect("the default prior is valid");
    let z0 = Tensor::<B, 2>::random([batch, d], Distribution::Normal(0.0, 1.0), &device);
    let z1 = Tensor::<B, 2>::random([batch, d], Distribution::Normal(0.0, 1.0), &device);
    let streams = NoiseStreams::new(0);
    let run = |samples: usize, method: TransportMethod| {
        // The draws of `best_of_j_seeded` at step 0.
        let draws = (0..samples as u64).map(|j| {
            let u = streams.uniform_centered(0, j, batch * m);
            Tensor::<B, 1>::from_floats(u.as_slice(), &device).reshape([batch, m])
        });
        let best = best_of_j_with(
            &operators,
            &params,
            z0.clone(),
            z1.clone(),
            &Threshold::none(),
            draws,
            method,
        )
        .expect("valid shapes");
        // Reading the errors back waits for the device.
        best.error.into_data();
    };
    for method in [TransportMethod::Expmv, TransportMethod::Generated] {
        // A warm-up with two candidates compiles what the measured run needs.
        run(2, method);
        if let Some(probe) = memory {
            probe(&device, true);
        }
        let start = Instant::now();
        run(args.best_of, method);
        let seconds = start.elapsed().as_secs_f64();
        let pool = memory
            .and_then(|probe| probe(&device, false))
            .map(|(_, reserved)| format!(", pool {:.0} MiB", reserved as f64 / 1048576.0))
            .unwrap_or_default();
        println!(
            "{name}: best-of-{} at batch {batch}, M = {m}, {} blocks of {block}, transport \
             {method:?}: {seconds:.2} s{pool}",
            args.best_of,
            d / block
        );
    }
    // One candidate's transport, its generators formed inside the kernel or by a matmul first
    // (the tensors those would take: batch x blocks x block^2 f32).
    let problems = batch * d / block;
    let v = z0.reshape([problems, block]);
    let psi = operators.psi().val();
    let cfg = ExpmvConfig::default();
    let sync = || B::sync(&device).expect("the device finishes its queue");
    let dense = Tensor::<B, 2>::random([batch, m], Distribution::Normal(0.0, 0.05), &device);
    let half = dense.clone()
        * Tensor::<B, 2>::random([batch, m], Distribution::Uniform(0.0, 1.0), &device)
            .greater_elem(0.5)
            .float();
    println!(
        "{name}: one candidate's transport ({problems} problems of {block}; formed generators \
         {:.0} MiB), median of {} runs, ms:",
        (problems * block * block * 4) as f64 / 1048576.0,
        args.reps
    );
    for (label, c) in [("dense c", dense), ("half the coefficients zero", half)] {
        let fused = time(args.reps, || {
            let _y = expmv_generated(c.clone(), psi.clone(), v.clone(), &cfg).unwrap();
            sync();
        });
        let formed = time(args.reps, || {
            let a = operators
                .try_generator(c.clone())
                .unwrap()
                .reshape([problems, block, block]);
            let _y = expmv_with(a, v.clone(), &cfg).unwrap();
            sync();
        });
        println!(
            "  {label}: formed in the kernel {:.2}, formed first {:.2} ({:.2}x)",
            fused * 1e3,
            formed * 1e3,
            formed / fused
        );
    }
}

/// Writes the interpreter kernels' CUDA C++ into `dir` (see the module's documentation).
#[cfg(all(feature = "cuda", feature = "wgpu"))]
fn cuda_source(dir: &str, n: usize) {
    use burn_cubecl::cubecl::Runtime;
    use vlgo_core::gpu::{CudaTarget, cuda_sources};
    let client =
        burn::backend::wgpu::WgpuRuntime::client(&burn::backend::wgpu::WgpuDevice::default());
    let sources = cuda_sources(&client, n, &CudaTarget::H100).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let mut manifest = String::new();
    for k in &sources {
        let path = format!("{dir}/{}.cu", k.name);
        std::fs::write(&path, &k.source).unwrap_or_else(|e| panic!("{path}: {e}"));
        manifest += &format!("{}\t{}\t{}\t{}\n", k.name, k.entry, k.units, k.shared_bytes);
        println!(
            "{path}: {} units, {} bytes of shared memory",
            k.units, k.shared_bytes
        );
    }
    let path = format!("{dir}/kernels.tsv");
    std::fs::write(&path, manifest).unwrap_or_else(|e| panic!("{path}: {e}"));
}

fn main() {
    let args = args();
    if let Some(dir) = std::env::args().skip_while(|a| a != "--cuda-source").nth(1) {
        #[cfg(all(feature = "cuda", feature = "wgpu"))]
        return cuda_source(&dir, args.n);
        #[cfg(not(all(feature = "cuda", feature = "wgpu")))]
        panic!("--cuda-source {dir} needs --features wgpu,cuda");
    }
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(unused_mut))]
    let mut ran = false;
    #[cfg(feature = "cuda")]
    if run("cuda") {
        let memory = Some(vlgo_core::gpu::cuda_memory as MemoryProbe<burn::backend::Cuda>);
        if args.best_of > 0 {
            best_of::<burn::backend::Cuda>("cuda", &args, memory);
        } else {
            bench::<burn::backend::Cuda>("cuda", &args, memory);
        }
        ran = true;
    }
    #[cfg(feature = "wgpu")]
    if run("wgpu") {
        if args.best_of > 0 {
            best_of::<burn::backend::Wgpu>("wgpu", &args, None);
        } else {
            bench::<burn::backend::Wgpu>("wgpu", &args, None);
        }
        ran = true;
    }
    if !ran {
        let _ = (
            args.matrices,
            args.reps,
            args.n,
            args.tensor_ops,
            args.best_of,
            run("none"),
        );
        eprintln!("no GPU backend: build with --features cuda or --features wgpu");
    }
}
