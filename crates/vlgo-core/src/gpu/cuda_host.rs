//! Test support: runs the CUDA C++ of [`super::cuda_sources`] on the host CPU.
//!
//! Some of the kernels' code exists only on CUDA: the `wide` products and combinations read
//! shared memory as vectors, which WebGPU cannot, so the software-Vulkan tests never run it. A
//! C++ compiler of the host (g++, C++20) compiles CubeCL's CUDA C++ unchanged against a stand-in
//! for the CUDA runtime header (`cuda_host/cuda_runtime.h`): each unit of a cube is a thread,
//! `__syncthreads` a barrier, and the cubes run one at a time over one host array of dynamic
//! shared memory, which starts each cube as NaN. Each buffer is followed by guard words that
//! must come back unchanged (a write past its end) and read as NaN (a read past it). What it
//! checks is the generated code's arithmetic and indexing (vector types, the reinterpretation of
//! shared memory, the interpreter's programs); not its speed, nor what only the hardware decides
//! (warp scheduling, memory ordering beyond the barriers), nor cubes that would share memory
//! they should not (the cubes never run at the same time).
//!
//! The launch is packed as CubeCL's CUDA runtime packs it: the buffers in the kernel's
//! parameter order, then the info struct of the scalars (grouped by type, each group padded to
//! 8 bytes) and the static metadata (all buffers' lengths in elements, then all their logical
//! lengths, then the tensors' ranks, the offsets of their shapes and those of their strides in
//! the dynamic metadata). The host fills the lengths alone: [`run`] refuses a kernel that reads
//! anything else of the metadata.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::KernelSource;

const RUNTIME_HEADER: &str = include_str!("cuda_host/cuda_runtime.h");
const MAIN: &str = include_str!("cuda_host/main.cpp");

/// One argument buffer of a kernel: 4-byte words (f32 as bits, or u32), and whether the launch
/// passes it as a tensor (which adds its extended metadata) rather than an array.
#[derive(Debug, Clone)]
pub(crate) struct HostBuffer {
    pub words: Vec<u32>,
    pub tensor: bool,
}

impl HostBuffer {
    /// A tensor argument of f32 `values`.
    pub fn tensor(values: &[f32]) -> Self {
        Self {
            words: values.iter().map(|v| v.to_bits()).collect(),
            tensor: true,
        }
    }

    /// An array argument of f32 `values`.
    pub fn array(values: &[f32]) -> Self {
        Self {
            tensor: false,
            ..Self::tensor(values)
        }
    }

    /// An array argument of little-endian 4-byte words (a program table).
    pub fn array_bytes(bytes: &[u8]) -> Self {
        assert!(bytes.len().is_multiple_of(4), "{} bytes", bytes.len());
        Self {
            words: bytes
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect(),
            tensor: false,
        }
    }

    /// An array of `len` floats, all NaN (as memory a kernel must write before it reads).
    pub fn array_nan(len: usize) -> Self {
        Self {
            words: vec![f32::NAN.to_bits(); len],
            tensor: false,
        }
    }

    /// The words as f32.
    pub fn floats(&self) -> Vec<f32> {
        self.words.iter().map(|&w| f32::from_bits(w)).collect()
    }
}

/// Runs `kernel` on the host over `grid` cubes with the `buffers` (in its parameter order) and
/// its u32 `scalars`; the buffers hold what the kernel left in them afterwards.
///
/// # Errors
///
/// A message where the source does not take these arguments, the host compiler fails, or the
/// run fails: a write past a buffer's end, or a deadlock at a barrier (ended by a 10-minute
/// limit).
pub(crate) fn run(
    kernel: &KernelSource,
    grid: u32,
    buffers: &mut [HostBuffer],
    scalars: &[u32],
) -> Result<(), String> {
    let info = info_words(&kernel.source, buffers, scalars)
        .map_err(|e| format!("{}: {e}", kernel.name))?;
    let dir = scratch_dir()?;
    let binary = compile(kernel, &dir)?;
    let (input, output) = (dir.join("input.bin"), dir.join("output.bin"));
    let shared = kernel.shared_bytes as u32;
    let mut words = vec![grid, kernel.units, shared, buffers.len() as u32];
    for b in buffers.iter() {
        words.push(b.words.len() as u32);
        words.extend_from_slice(&b.words);
    }
    words.extend_from_slice(&info);
    std::fs::write(&input, bytes_of(&words)).map_err(|e| e.to_string())?;
    let run = Command::new("timeout")
        .arg("600")
        .arg(&binary)
        .arg(&input)
        .arg(&output)
        .output()
        .map_err(|e| format!("running {} under timeout(1): {e}", binary.display()))?;
    if !run.status.success() {
        return Err(format!(
            "{} on the host: {} {}",
            kernel.name,
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let out = std::fs::read(&output).map_err(|e| e.to_string())?;
    let mut at = 0;
    for b in buffers.iter_mut() {
        let len = b.words.len() * 4;
        let bytes = out
            .get(at..at + len)
            .ok_or_else(|| format!("{}: the output file is short", kernel.name))?;
        b.words = HostBuffer::array_bytes(bytes).words;
        at += len;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The info struct's words for these arguments, after checking them against its declaration
/// in `source` (`struct info_st { uint32 scalars_uint32[K];uint32 static_meta[M]; }`, passed by
/// value) and that the kernel reads no metadata but the buffers' lengths (the host leaves ranks,
/// shapes and strides unset), and no buffer as vectors (whose lengths would count vectors).
fn info_words(source: &str, buffers: &[HostBuffer], scalars: &[u32]) -> Result<Vec<u32>, String> {
    let declared = |field: &str| -> Result<usize, String> {
        let start = source
            .find(&format!("{field}["))
            .ok_or_else(|| format!("the info struct has no {field}"))?
            + field.len()
            + 1;
        let len = source[start..].find(']').unwrap_or(0);
        source[start..start + len]
            .parse()
            .map_err(|_| format!("{field}'s length is not a number"))
    };
    let pad = |len: usize| len.next_multiple_of(2);
    let tensors = buffers.iter().filter(|b| b.tensor).count();
    let meta = 2 * buffers.len() + 3 * tensors;
    let (k, m) = (declared("scalars_uint32")?, declared("static_meta")?);
    if k != pad(scalars.len()) || m != pad(meta) {
        return Err(format!(
            "the kernel declares {k} u32 scalars and {m} metadata words; the arguments make \
             {} and {}",
            pad(scalars.len()),
            pad(meta)
        ));
    }
    if source.contains("dynamic_meta[") || source.contains("info_ptr") {
        return Err(
            "the kernel reads tensor shapes or strides, or takes its info struct by \
                    pointer; the host passes neither"
                .into(),
        );
    }
    let lengths_end = 2 * buffers.len();
    for read in source.split("info.static_meta[uint32(").skip(1) {
        let index: usize = read
            .split(')')
            .next()
            .and_then(|i| i.parse().ok())
            .ok_or("a metadata read at a run-time index")?;
        if index >= lengths_end {
            return Err(format!(
                "the kernel reads metadata word {index}, past the buffers' lengths (which \
                 end at {lengths_end}); the host leaves it unset"
            ));
        }
    }
    let params = source
        .split("__global__")
        .nth(1)
        .and_then(|s| s.split(')').nth(1))
        .unwrap_or_default();
    if params.contains("_4* buffer_") || params.contains("_2* buffer_") {
        return Err("a buffer is passed as vectors; the host counts lengths in scalars".into());
    }
    let mut words = scalars.to_vec();
    words.resize(k, 0);
    let lengths = buffers.iter().map(|b| b.words.len() as u32);
    words.extend(lengths.clone());
    words.extend(lengths);
    // Ranks and offsets into the (unread) dynamic metadata.
    words.extend(std::iter::repeat_n(0, 3 * tensors));
    words.resize(k + m, 0);
    Ok(words)
}

/// Little-endian bytes of `words`.
fn bytes_of(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A new directory for one run's files, removed after a run that succeeds (kept after a failure,
/// for a look at the source and the compiler's input).
fn scratch_dir() -> Result<PathBuf, String> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vlgo-cuda-host-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Compiles `kernel` with the host's C++ compiler (`CXX`, default g++) into `dir`.
fn compile(kernel: &KernelSource, dir: &Path) -> Result<PathBuf, String> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    write("cuda_runtime.h", RUNTIME_HEADER)?;
    write("main.cpp", MAIN)?;
    write("kernel.cu", &kernel.source)?;
    let binary = dir.join("kernel");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let out = Command::new(&compiler)
        .current_dir(dir)
        // C++20 for std::barrier. The kernels read the same shared memory as floats and as
        // vectors of four, which C++'s aliasing rules forbid and CUDA allows: no strict
        // aliasing. -O1 compiles 200 KB of generated code in seconds; -w, because that code
        // declares many values it never reads.
        .args([
            "-std=c++20",
            "-O1",
            "-fno-strict-aliasing",
            "-pthread",
            "-w",
            "-I.",
        ])
        .arg("-DKERNEL_SOURCE=\"kernel.cu\"")
        .arg(format!("-DKERNEL_ENTRY={}", kernel.entry))
        .args(["main.cpp", "-o"])
        .arg(&binary)
        .output()
        .map_err(|e| {
            format!("{compiler}: {e} (the host runs of CUDA kernels need a C++20 compiler)")
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} does not compile on the host:\n{}",
            kernel.name,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(binary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expm::{ExpmMethod, dense};
    use crate::gpu::{
        CudaTarget, Layout, RESIDENT_BYTES_VAR, cuda_sources, kernels::checkpoint_len,
    };
    use burn::backend::NdArray;
    use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
    use burn::tensor::{DType, Tensor, TensorData};
    use burn_cubecl::cubecl::Runtime;

    /// The reference: the tensor-op path, in f64.
    type Reference = NdArray;

    /// Per matrix scale of the test batch: from the lowest Taylor degree to several squarings
    /// (1-norms of about 0.05 to 25 at n = 64); the last matrix holds an infinity.
    const SCALES: [f32; 5] = [0.01, 0.3, 1.5, 6.0, 1.0];

    /// Relative error allowed against the f64 reference (the f32 kernels reach about 2e-6 here).
    const TOL: f64 = 1e-5;

    /// What an output holds before the kernel runs: finite, so that an output left unwritten
    /// fails where the reference is NaN too, and far from any result.
    const FILL: f32 = -3.0e30;

    /// The matrix that `expmv`'s test routes to the Taylor kernels: the interpreter must leave
    /// its output as it was.
    const TAYLOR_ROUTED: usize = 1;

    /// Values uniform in [-scale, scale] / sqrt(n), `len` per scale, from a fixed linear
    /// congruential sequence.
    fn batch(len: usize, n: usize, seed: u64, scales: &[f32]) -> Vec<f32> {
        let mut state = seed;
        let mut out = Vec::with_capacity(scales.len() * len);
        for &scale in scales {
            for _ in 0..len {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let u = (state >> 40) as f32 / (1u64 << 24) as f32;
                out.push((2.0 * u - 1.0) * scale / (n as f32).sqrt());
            }
        }
        out
    }

    /// `values` as a batch of n x n matrices in f64.
    fn tensor(values: &[f32], n: usize) -> Tensor<Reference, 3> {
        let data: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        let count = values.len() / (n * n);
        // The dtype named: the device's default float type is a setting other tests may change.
        let data = TensorData::new(data, [count, n, n]);
        let t = Tensor::from_data(data, (&Default::default(), DType::F64));
        assert_eq!(t.dtype(), DType::F64);
        t
    }

    /// A reference result's values.
    fn values(t: Tensor<Reference, 3>) -> Vec<f64> {
        t.into_data().to_vec().unwrap()
    }

    /// Per matrix (`len` values each), `got` is within relative distance [`TOL`] of `want`, or
    /// non-finite throughout where `want` is not finite.
    fn assert_close(what: &str, got: &[f32], want: &[f64], len: usize) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (m, (g, w)) in got.chunks(len).zip(want.chunks(len)).enumerate() {
            if w.iter().any(|v| !v.is_finite()) {
                assert!(
                    g.iter().all(|v| !v.is_finite()),
                    "{what}, matrix {m}: finite entries where the reference is not"
                );
                continue;
            }
            let diff: f64 = g
                .iter()
                .zip(w)
                .map(|(&g, w)| (f64::from(g) - w).powi(2))
                .sum();
            let norm: f64 = w.iter().map(|w| w * w).sum();
            let err = (diff / norm).sqrt();
            assert!(err <= TOL, "{what}, matrix {m}: relative error {err:e}");
        }
    }

    /// Cubes of a host launch: each walks through several matrices.
    const CUBES: usize = 2;

    /// Runs interpreter kernel `k` over [`CUBES`] cubes with its `lead`ing arguments, then the
    /// program tables, an output of `out` floats (all [`FILL`]) and a workspace of `reserve` floats more than
    /// the launch's; returns the output and the workspace.
    fn interpret(
        k: &KernelSource,
        n: usize,
        lead: &[HostBuffer],
        out: usize,
        reserve: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        let mut buffers = lead.to_vec();
        buffers.extend([
            HostBuffer::array_bytes(&k.table.ops_bytes),
            HostBuffer::array_bytes(&k.table.vals_bytes),
            HostBuffer::tensor(&vec![FILL; out]),
            // Slots in device memory take a share per cube launched.
            HostBuffer::array_nan(
                reserve
                    + Layout {
                        grid: CUBES,
                        ..k.layout
                    }
                    .workspace(k.table.slots),
            ),
        ]);
        run(
            k,
            CUBES as u32,
            &mut buffers,
            &[n as u32, k.table.slots as u32],
        )
        .unwrap();
        let work = buffers.pop().unwrap().floats();
        (buffers.pop().unwrap().floats(), work)
    }

    /// The interpreter kernels as CUDA runs them (products and combinations four floats wide,
    /// slots resident in shared memory), run on the host, agree with the tensor-op reference:
    /// the exponential by Padé and Taylor, the checkpointing forward and the derivative from its
    /// checkpoint, the recomputing derivative, and `expmv`'s dense route and its adjoints.
    /// n = 12 leaves units without a tile; at n = 128 the slots lie in device memory. Two cubes
    /// walk through five matrices.
    #[test]
    fn cuda_kernels_run_on_the_host_agree_with_the_reference() {
        let client = WgpuRuntime::client(&WgpuDevice::default());
        for n in [12, 64, 128] {
            let sources = cuda_sources(&client, n, &CudaTarget::H100).unwrap();
            let kernel = |name: &str| sources.iter().find(|k| k.name == name).unwrap();
            if n <= 64 && std::env::var(RESIDENT_BYTES_VAR).is_err() {
                // Slots resident and read four floats wide, as on CUDA, unless the process
                // turns that off.
                let wide = crate::gpu::wide_allowed();
                assert!(
                    sources
                        .iter()
                        .all(|k| k.layout.wide == wide && k.layout.resident > 0)
                );
            } else if n == 128 {
                // Taylor's slots lie in device memory, with k-slabs staged in shared memory.
                assert_eq!(kernel("frechet_saved_kernel").layout.resident, 0);
            }
            let (count, nn) = (SCALES.len(), n * n);
            let mut a = batch(nn, n, 7, &SCALES);
            a[(count - 1) * nn + 3] = f32::INFINITY;
            let g = batch(nn, n, 11, &[1.0; SCALES.len()]);
            let at = |what: &str| format!("{what} at n = {n}");
            let plan_here = |k: &KernelSource| HostBuffer::array_bytes(&k.table.plan_bytes);

            for (name, method) in [
                ("expm_kernel.pade", ExpmMethod::Pade),
                ("expm_kernel.taylor", ExpmMethod::Taylor),
            ] {
                let k = kernel(name);
                let (out, _) =
                    interpret(k, n, &[HostBuffer::tensor(&a), plan_here(k)], count * nn, 0);
                let want = values(dense::expm_forward(tensor(&a, n), method));
                assert_close(&at(name), &out, &want, nn);
            }

            let expm = values(dense::expm_forward(tensor(&a, n), ExpmMethod::Taylor));
            let reference = tensor(&a, n);
            let plan = dense::plan(&reference, ExpmMethod::Taylor);
            let want = values(dense::expm_backward(
                reference.clone(),
                tensor(&g, n),
                &plan,
            ));

            // The checkpointing forward, then the derivative from its checkpoint.
            let k = kernel("expm_saving_kernel");
            let floats = checkpoint_len(count, n);
            let (out, work) = interpret(
                k,
                n,
                &[HostBuffer::tensor(&a), plan_here(k)],
                count * nn,
                floats,
            );
            assert_close(&at(&k.name), &out, &expm, nn);
            let checkpoint = HostBuffer::tensor(&work[..floats]);
            let lead = [HostBuffer::tensor(&a), HostBuffer::tensor(&g), checkpoint];
            let (out, _) = interpret(kernel("frechet_saved_kernel"), n, &lead, count * nn, 0);
            assert_close(&at("frechet_saved_kernel"), &out, &want, nn);

            let k = kernel("frechet_kernel");
            let lead = [HostBuffer::tensor(&a), HostBuffer::tensor(&g), plan_here(k)];
            let (out, _) = interpret(k, n, &lead, count * nn, 0);
            assert_close(&at(&k.name), &out, &want, nn);

            // `expmv` with the matrices routed to the explicit exponential (a non-finite one
            // becomes NaN there): exp(A) v, then L(A^T, u v^T) and exp(A)^T u. The one routed
            // to the Taylor kernels keeps the output's fill.
            let v = batch(n, n, 13, &[1.0; SCALES.len()]);
            let u = batch(n, n, 17, &[1.0; SCALES.len()]);
            let routes: Vec<f32> = (0..count)
                .flat_map(|m| [if m == TAYLOR_ROUTED { 0.0 } else { 1.0 }, 0.0, 0.0, 0.0])
                .collect();
            let routes = HostBuffer::array(&routes);
            let left = |mut want: Vec<f64>, len: usize| {
                want[TAYLOR_ROUTED * len..(TAYLOR_ROUTED + 1) * len].fill(f64::from(FILL));
                want
            };
            let matvec = |m: &[f64], x: &[f32], transpose: bool| -> Vec<f64> {
                let mut y = vec![0.0; count * n];
                for (b, y) in y.chunks_mut(n).enumerate() {
                    for (i, yi) in y.iter_mut().enumerate() {
                        *yi = (0..n)
                            .map(|k| {
                                let e = if transpose { k * n + i } else { i * n + k };
                                m[b * nn + e] * f64::from(x[b * n + k])
                            })
                            .sum();
                    }
                }
                y
            };
            let k = kernel("expmv_dense_kernel");
            let lead = [
                HostBuffer::tensor(&a),
                HostBuffer::tensor(&v),
                routes.clone(),
                plan_here(k),
            ];
            let (out, _) = interpret(k, n, &lead, count * n, 0);
            let want = left(matvec(&expm, &v, false), n);
            assert_close(&at(&k.name), &out, &want, n);

            let k = kernel("expmv_dense_backward_kernel");
            let lead = [
                HostBuffer::tensor(&a),
                HostBuffer::tensor(&v),
                HostBuffer::tensor(&u),
                routes,
                plan_here(k),
            ];
            let (out, _) = interpret(k, n, &lead, count * (nn + n), 0);
            let outer: Vec<f32> = (0..count * nn)
                .map(|e| u[e / nn * n + e % nn / n] * v[e / nn * n + e % n])
                .collect();
            let abar = values(dense::expm_backward(reference, tensor(&outer, n), &plan));
            let (got_abar, got_vbar): (Vec<f32>, Vec<f32>) = {
                let per = out.chunks(nn + n);
                let abar = per.clone().flat_map(|m| m[..nn].to_vec()).collect();
                (abar, per.flat_map(|m| m[nn..].to_vec()).collect())
            };
            assert_close(
                &at("expmv_dense_backward_kernel (A)"),
                &got_abar,
                &left(abar, nn),
                nn,
            );
            let vbar = left(matvec(&expm, &u, true), n);
            assert_close(&at("expmv_dense_backward_kernel (v)"), &got_vbar, &vbar, n);
        }
    }
}
