//! The CUDA C++ of the interpreter kernels, generated without a CUDA device.
//!
//! A kernel's code is CubeCL IR built on the host; the CUDA runtime compiles it to C++ and hands
//! that to NVRTC when the kernel first launches. [`cuda_sources`] runs the first step alone, with
//! the comptime arguments and workgroup size that the launches of this process would choose on a
//! given CUDA device ([`super::RESIDENT_BYTES_VAR`] and [`super::WIDE_VAR`] included), so that
//! the kernels can be compiled offline (NVRTC, then `ptxas -v` for registers,
//! spills and shared memory; `scripts/cuda-resources.sh`): a CubeCL-to-CUDA compile error
//! shows on a machine with no GPU, and the occupancy that a kernel change reaches is known before
//! a GPU times it.

use burn_cubecl::CubeRuntime;
use burn_cubecl::cubecl::cuda::CudaCompiler;
use burn_cubecl::cubecl::ir::DeviceProperties;
use burn_cubecl::cubecl::prelude::*;
use burn_cubecl::cubecl::{Compiler, CubeTask};

use super::{Layout, kernels, program};
use crate::error::{Result, VlgoError};
use crate::expm::ExpmMethod;

/// The CUDA device that the sources are generated for: what the launches read from its
/// properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaTarget {
    /// Compute capability times ten (90 for Hopper).
    pub arch: u32,
    /// Most bytes of shared memory a cube may hold (the opt-in maximum per block).
    pub max_shared_bytes: usize,
    /// Most units per cube.
    pub max_units: u32,
    /// Bytes of shared memory per multiprocessor, which its resident cubes share (each also
    /// takes 1 KiB of it for the system).
    pub shared_per_multiprocessor: usize,
    /// Bytes of device memory.
    pub memory_bytes: u64,
}

impl CudaTarget {
    /// An H100 (SXM, 80 GB): sm_90, 227 KiB of shared memory per block.
    pub const H100: Self = Self {
        arch: 90,
        max_shared_bytes: 232_448,
        max_units: 1024,
        shared_per_multiprocessor: 233_472,
        memory_bytes: 80 << 30,
    };
}

/// One kernel's CUDA C++ and the launch it was generated for.
#[derive(Debug, Clone)]
pub struct KernelSource {
    /// The launch's name: the kernel and its program table (`expm_kernel.taylor`, ...).
    pub name: String,
    /// The entry point in `source`.
    pub entry: String,
    /// Units per cube of the launch.
    pub units: u32,
    /// Bytes of shared memory per cube (dynamic shared memory at launch).
    pub shared_bytes: usize,
    /// The CUDA C++ that NVRTC compiles.
    pub source: String,
    /// The program table the launch passes.
    #[cfg_attr(
        not(all(test, feature = "wgpu")),
        allow(dead_code, reason = "read by the host runs of the tests")
    )]
    pub(super) table: &'static program::Table,
    /// The launch's geometry and comptime arguments.
    #[cfg_attr(
        not(all(test, feature = "wgpu")),
        allow(dead_code, reason = "read by the host runs of the tests")
    )]
    pub(super) layout: Layout,
}

/// The CUDA C++ of every interpreter kernel at matrix size `n` (1 to [`super::MAX_N`]), as the
/// launches on `target` would compile it: per kernel and program table, the workgroup size and
/// the comptime arguments (resident slots, products four floats wide where n allows) that
/// [`super::expm`] and its relatives choose there. `client` lends the kernels' IR its device
/// properties; no kernel reads them, so any backend serves (software Vulkan included).
///
/// # Errors
///
/// [`VlgoError::InvalidParameter`] for n outside 1 to [`super::MAX_N`];
/// [`VlgoError::KernelCompilation`] where CubeCL reports that it cannot compile a kernel's IR
/// to CUDA.
///
/// # Panics
///
/// Where CubeCL's C++ compiler panics on a construct it does not support, instead of reporting
/// it (as on a device, where that panic happens on a device thread).
///
/// # Examples
///
/// ```no_run
/// # #[cfg(all(feature = "cuda", feature = "wgpu"))]
/// # {
/// use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
/// use burn_cubecl::cubecl::Runtime;
/// use vlgo_core::gpu::{CudaTarget, cuda_sources};
///
/// let client = WgpuRuntime::client(&WgpuDevice::default());
/// for kernel in cuda_sources(&client, 64, &CudaTarget::H100)? {
///     println!("{}: {} units, {} bytes shared", kernel.name, kernel.units, kernel.shared_bytes);
/// }
/// # }
/// # Ok::<(), vlgo_core::VlgoError>(())
/// ```
pub fn cuda_sources<R: CubeRuntime>(
    client: &ComputeClient<R>,
    n: usize,
    target: &CudaTarget,
) -> Result<Vec<KernelSource>> {
    if !(1..=super::MAX_N).contains(&n) {
        return Err(VlgoError::invalid(
            "n",
            n,
            "a matrix size the kernels take (1 to MAX_N)",
        ));
    }
    let mut props: DeviceProperties = client.properties().clone();
    props.hardware.max_shared_memory_size = target.max_shared_bytes;
    props.hardware.max_units_per_cube = target.max_units;
    props.hardware.max_cube_count = (u32::MAX >> 1, 65_535, 65_535);
    props.memory.max_page_size = target.memory_bytes / 4;
    let layout = |table: &program::Table| {
        // A batch large enough that the grid is the launches' cap.
        Layout::for_device(&props, super::wide_allowed(), n, super::MAX_GRID, table)
    };
    // As the CUDA runtime sets them for the architecture.
    type Options = <CudaCompiler as Compiler>::CompilationOptions;
    let mut options = Options {
        warp_size: 32,
        ..Default::default()
    };
    let features = &mut options.supports_features;
    features.fast_math = true;
    features.grid_constants = target.arch >= 70;
    features.fast_tanh = target.arch >= 75;
    features.clusters = target.arch >= 90;
    features.elect_sync = target.arch >= 90;

    type Task = Box<dyn CubeTask<CudaCompiler>>;
    type Build<'a> = &'a dyn Fn(KernelSettings, &Layout) -> Task;
    let t = || TensorCompilationArg { inplace: None };
    let a = || ArrayCompilationArg { inplace: None };
    // Builds the kernel of `$module` for a launch: the compilation arguments of its tensors (t)
    // and arrays (a) in their order, then the two scalars and the comptime arguments that every
    // interpreter kernel takes.
    macro_rules! task {
        ($module:ident :: $kernel:ident, [$($arg:ident),*]) => {
            |settings: KernelSettings, l: &Layout| -> Task {
                Box::new(KernelTask::new(kernels::$module::$kernel::<R>::new(
                    settings, client.clone(), $($arg(),)* (), (), l.slab, l.cap, l.resident, l.wide,
                )))
            }
        };
    }
    // Each kernel with the program table its launches take.
    let launches: [(&str, &'static program::Table, Build); 7] = [
        (
            "expm_kernel.pade",
            program::forward_table(ExpmMethod::Pade),
            &task!(expm_kernel::ExpmKernel, [t, a, a, a, t, a]),
        ),
        (
            "expm_kernel.taylor",
            program::forward_table(ExpmMethod::Taylor),
            &task!(expm_kernel::ExpmKernel, [t, a, a, a, t, a]),
        ),
        (
            "expm_saving_kernel",
            program::saving_table(),
            &task!(expm_saving_kernel::ExpmSavingKernel, [t, a, a, a, t, a]),
        ),
        (
            "frechet_saved_kernel",
            program::frechet_saved_table(),
            &task!(
                frechet_saved_kernel::FrechetSavedKernel,
                [t, t, t, a, a, t, a]
            ),
        ),
        (
            "frechet_kernel",
            program::frechet_table(),
            &task!(frechet_kernel::FrechetKernel, [t, t, a, a, a, t, a]),
        ),
        (
            "expmv_dense_kernel",
            program::forward_table(ExpmMethod::Pade),
            &task!(
                expmv_dense_kernel::ExpmvDenseKernel,
                [t, t, a, a, a, a, t, a]
            ),
        ),
        (
            "expmv_dense_backward_kernel",
            program::frechet_table(),
            &task!(
                expmv_dense_backward_kernel::ExpmvDenseBackwardKernel,
                [t, t, t, a, a, a, a, t, a]
            ),
        ),
    ];
    let mut sources = Vec::with_capacity(launches.len());
    for (name, table, build) in launches {
        let l = layout(table);
        let settings = KernelSettings::default()
            .cube_dim(l.cube_dim())
            .address_type(AddressType::U32);
        let task = build(settings, &l);
        let compiled = task
            .compile(
                &mut Default::default(),
                &options,
                ExecutionMode::Unchecked,
                task.address_type(),
            )
            .map_err(|e| VlgoError::KernelCompilation {
                kernel: name.to_string(),
                reason: format!("{e:?}"),
            })?;
        let shared_bytes = compiled
            .repr
            .as_ref()
            .map_or(0, |repr| repr.shared_memory_size());
        sources.push(KernelSource {
            name: name.to_string(),
            entry: compiled.entrypoint_name,
            units: l.units as u32,
            shared_bytes,
            source: compiled.source,
            table,
            layout: l,
        });
    }
    Ok(sources)
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::*;
    use burn::backend::wgpu::{WgpuDevice, WgpuRuntime};
    use burn_cubecl::cubecl::Runtime;

    /// CubeCL compiles every interpreter kernel to CUDA C++ with the launch it gets on an H100
    /// (a compile error would otherwise show first on a GPU, as a panic on a device thread):
    /// slots in shared memory (n = 64, and n = 5 with scalar reads) and in device memory with
    /// k-slabs and a larger solve (n = 128, 1024). At n = 64 the kernels that autodiff's Taylor
    /// forward and backward run keep two cubes per multiprocessor by their shared memory.
    #[test]
    fn every_interpreter_kernel_compiles_to_cuda_as_launched() {
        let client = WgpuRuntime::client(&WgpuDevice::default());
        let h100 = CudaTarget::H100;
        for (n, units) in [(64, 256), (5, 32), (128, 256), (crate::gpu::MAX_N, 256)] {
            let sources = cuda_sources(&client, n, &h100).unwrap();
            for k in &sources {
                assert_eq!(k.units, units, "{} at n = {n}", k.name);
                let entry = format!("__launch_bounds__({units}){} (", k.entry);
                assert!(
                    k.source.contains(&entry),
                    "{} at n = {n}: no {entry}",
                    k.name
                );
                assert!(k.shared_bytes > 0 && k.shared_bytes <= h100.max_shared_bytes);
            }
            let defaults = std::env::var(crate::gpu::RESIDENT_BYTES_VAR).is_err();
            if n != 64 || !defaults {
                continue;
            }
            let shared = |name: &str| {
                let k = sources.iter().find(|k| k.name == name).unwrap();
                k.shared_bytes
            };
            for name in ["expm_saving_kernel", "frechet_saved_kernel"] {
                // What a cube takes of the multiprocessor: its shared memory and the system's
                // 1 KiB, in units of 128 bytes.
                let per_cube = (shared(name) + 1024).next_multiple_of(128);
                assert!(
                    2 * per_cube <= h100.shared_per_multiprocessor,
                    "{name}: {} bytes of shared memory",
                    shared(name)
                );
            }
            // The recomputing derivative holds 14 slots where the one from a checkpoint holds 7
            // (the small shared arrays beside them are placed, and padded, in an order that
            // differs between processes).
            let slots_apart = shared("frechet_kernel") - shared("frechet_saved_kernel");
            assert!(
                slots_apart.abs_diff(7 * 64 * 64 * 4) < 64,
                "{slots_apart} bytes"
            );
        }
        for n in [0, crate::gpu::MAX_N + 1] {
            let err = cuda_sources(&client, n, &h100).unwrap_err();
            assert!(matches!(err, VlgoError::InvalidParameter { name: "n", .. }));
        }
    }
}
