//! The exponential on CubeCL backends (`wgpu`, `cuda`): our own kernels, one cube per matrix.
//!
//! * [`expm`]: Padé [m/m] (m in {3, 5, 7}, in-kernel Gauss-Jordan with partial pivoting) or
//!   Bader-Blanes-Casas Taylor (degrees 12 and 18), then the squarings. Degree and scaling are
//!   chosen per matrix on the device by a planning kernel: no host synchronisation.
//! * [`expm_backward`]: the adjoint of A, L(A^T, G), by forward-mode differentiation of the
//!   degree-18 Taylor scheme and its squarings, which recomputes the forward in the same kernel
//!   and stores nothing between the passes. Both forward methods use it: each approximates exp to
//!   the f32 bar, so the gradient of either is L(A^T, G) to that accuracy.
//!
//! A cube walks through its share of the batch (the grid is capped), so the workspace is a fixed
//! number of n x n slots per cube whatever the batch size. Inputs other than f32 [N, n, n] with
//! 1 <= n <= [`MAX_N`] keep the tensor-op path (f64 is the oracle there).

mod kernels;

use burn::tensor::{DType, Shape};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeRuntime, cubecl::prelude::*};
use cubecl::{CubeCount, CubeDim};

use crate::expm::ExpmMethod;
use crate::expm::scheme::{BBC12, BBC18, pade_coefficients};
use kernels::{FORWARD_SLOTS, FRECHET_SLOTS, PADE_ROW, PLAN_STRIDE};

/// Largest matrix size the kernels take (their k-slabs of 2 n floats must fit shared memory).
pub const MAX_N: usize = 1024;

/// Most cubes launched; each walks through the matrices `cube, cube + grid, ...`.
const MAX_GRID: usize = 1024;

/// Cap of the workspace in bytes (also at most half the largest buffer the device allows).
const WORKSPACE_BYTES: usize = 256 << 20;

/// Most shared memory a cube plans for (less where the device offers less: WebGPU guarantees
/// only 16 KiB per workgroup); more would cost resident cubes per multiprocessor.
const SHARED_BYTES: usize = 48 << 10;

/// Whether the kernels take this tensor: f32 [N, n, n] with 1 <= n <= [`MAX_N`].
///
/// For now only on the CUDA runtime: on software Vulkan (CI's `wgpu`) the kernels are correct but
/// their shader compiles made the suite run past its time, so `wgpu` keeps the tensor-op path
/// until the kernels are smaller.
pub fn accepts<R: CubeRuntime>(a: &CubeTensor<R>) -> bool {
    takes::<R>(a.dtype, a.meta.shape())
}

/// [`accepts`] from a dtype and shape, for wrappers (fusion) that hold no `CubeTensor`.
pub fn takes<R: CubeRuntime>(dtype: DType, shape: &Shape) -> bool {
    core::any::type_name::<R>().contains("Cuda")
        && dtype == DType::F32
        && shape.num_dims() == 3
        && shape[1] == shape[2]
        && (1..=MAX_N).contains(&shape[1])
}

/// Launch geometry for [count, n, n] with `slots` workspace matrices per cube.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    n: usize,
    /// Width of the k-slabs staged in shared memory.
    tk: usize,
    /// Units per cube (a power of two from 32 to 256).
    units: usize,
    /// Cubes launched.
    grid: usize,
}

impl Layout {
    fn new<R: CubeRuntime>(
        client: &ComputeClient<R>,
        n: usize,
        count: usize,
        slots: usize,
    ) -> Self {
        let props = client.properties();
        let tiles = n.div_ceil(4).pow(2);
        // A power of two (the pivot search is a tree over the units), one unit per 4 x 4 tile.
        let max_units = (props.hardware.max_units_per_cube as usize).clamp(32, 256);
        let max_units = 1 << max_units.ilog2();
        let units = tiles.next_power_of_two().clamp(32, max_units);
        let shared = props.hardware.max_shared_memory_size.min(SHARED_BYTES);
        // The solve's multipliers (n floats) and pivot search (2 per unit) share the budget
        // with the two slabs.
        let slabs = shared.saturating_sub(n * 4 + units * 8 + 256);
        let mut tk = 32usize.min(n.next_power_of_two());
        while tk > 1 && 2 * n * tk * 4 > slabs {
            tk /= 2;
        }
        let per_cube = slots * n * n * 4;
        let budget = WORKSPACE_BYTES.min(props.memory.max_page_size as usize / 2);
        let grid = count
            .min(budget / per_cube)
            .min(MAX_GRID)
            .min(props.hardware.max_cube_count.0 as usize)
            .max(1);
        Self { n, tk, units, grid }
    }

    fn cube_count(&self) -> CubeCount {
        CubeCount::Static(self.grid as u32, 1, 1)
    }

    fn cube_dim(&self) -> CubeDim {
        CubeDim::new_1d(self.units as u32)
    }
}

fn f32_buffer<R: CubeRuntime>(
    client: &ComputeClient<R>,
    device: &R::Device,
    values: &[f32],
) -> CubeTensor<R> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let handle = client.create_from_slice(&bytes);
    CubeTensor::new_contiguous(
        client.clone(),
        device.clone(),
        Shape::new([values.len()]),
        handle,
        DType::F32,
    )
}

fn empty<R: CubeRuntime>(like: &CubeTensor<R>, len: usize) -> CubeTensor<R> {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::new([len]),
        DType::F32,
    )
}

/// Padé rows b_0..b_7 for m = 3, 5, 7, then nothing else.
fn pade_table() -> Vec<f32> {
    let mut table = vec![0f32; 3 * PADE_ROW];
    for (row, m) in [3usize, 5, 7].into_iter().enumerate() {
        for (j, c) in pade_coefficients(m).into_iter().enumerate() {
            table[row * PADE_ROW + j] = c as f32;
        }
    }
    table
}

/// Taylor rows: degree 12 (4 x [I, X, X^2, X^3]), then degree 18 (5 x [I, X, X^2, X^3, X^6]).
fn taylor_table() -> Vec<f32> {
    BBC12
        .iter()
        .flatten()
        .chain(BBC18.iter().flatten())
        .map(|&c| c as f32)
        .collect()
}

/// Runs the planning kernel: per matrix 2^-s, s, degree and the 1-norm (of A^T when `rows`).
fn plan<R: CubeRuntime>(
    a: &CubeTensor<R>,
    layout: &Layout,
    count: usize,
    rows: bool,
    table: u32,
) -> CubeTensor<R> {
    let plan = empty(a, count * PLAN_STRIDE);
    kernels::plan_kernel::launch::<R>(
        &a.client,
        layout.cube_count(),
        layout.cube_dim(),
        a.clone().into_tensor_arg(),
        plan.clone().into_array_arg(),
        layout.n,
        layout.units,
        rows,
        table,
    );
    plan
}

/// exp(A) for f32 A [N, n, n] (see [`accepts`]).
pub fn expm<R: CubeRuntime>(a: CubeTensor<R>, method: ExpmMethod) -> CubeTensor<R> {
    let a = into_contiguous(a);
    let shape = a.meta.shape().clone();
    let (count, n) = (shape[0], shape[1]);
    let out = empty_device_contiguous_dtype(a.client.clone(), a.device.clone(), shape, DType::F32);
    if count == 0 {
        return out;
    }
    let layout = Layout::new(&a.client, n, count, FORWARD_SLOTS);
    let taylor = method == ExpmMethod::Taylor;
    let table = if taylor {
        kernels::PLAN_TAYLOR
    } else {
        kernels::PLAN_PADE
    };
    let plan = plan(&a, &layout, count, false, table);
    let coef = f32_buffer(
        &a.client,
        &a.device,
        &if taylor { taylor_table() } else { pade_table() },
    );
    let work = empty(&a, layout.grid * FORWARD_SLOTS * n * n);
    kernels::expm_kernel::launch::<R>(
        &a.client,
        layout.cube_count(),
        layout.cube_dim(),
        a.clone().into_tensor_arg(),
        plan.into_array_arg(),
        coef.into_array_arg(),
        out.clone().into_tensor_arg(),
        work.into_array_arg(),
        n,
        layout.tk,
        layout.units,
        taylor,
    );
    out
}

/// The adjoint of A given the adjoint `grad` of exp(A), for f32 A [N, n, n].
pub fn expm_backward<R: CubeRuntime>(a: CubeTensor<R>, grad: CubeTensor<R>) -> CubeTensor<R> {
    let a = into_contiguous(a);
    let grad = into_contiguous(grad);
    let shape = a.meta.shape().clone();
    let (count, n) = (shape[0], shape[1]);
    let out = empty_device_contiguous_dtype(a.client.clone(), a.device.clone(), shape, DType::F32);
    if count == 0 {
        return out;
    }
    let layout = Layout::new(&a.client, n, count, FRECHET_SLOTS);
    let plan = plan(&a, &layout, count, true, kernels::PLAN_TAYLOR18);
    let coef = f32_buffer(&a.client, &a.device, &taylor_table());
    let work = empty(&a, layout.grid * FRECHET_SLOTS * n * n);
    let client = a.client.clone();
    kernels::frechet_kernel::launch::<R>(
        &client,
        layout.cube_count(),
        layout.cube_dim(),
        a.into_tensor_arg(),
        grad.into_tensor_arg(),
        plan.into_array_arg(),
        coef.into_array_arg(),
        out.clone().into_tensor_arg(),
        work.into_array_arg(),
        n,
        layout.tk,
        layout.units,
    );
    out
}

/// Memory of the CUDA runtime's pool on `device`: (bytes in use, bytes reserved). With `reset`
/// the pool first gives back what it does not use, so a measurement after it reads the
/// reservation that the measured work needed. For benchmarks.
#[cfg(feature = "cuda")]
pub fn cuda_memory(device: &cubecl::cuda::CudaDevice, reset: bool) -> Option<(u64, u64)> {
    use cubecl::Runtime;
    let client = cubecl::cuda::CudaRuntime::client(device);
    if reset {
        client.memory_cleanup();
    }
    client
        .memory_usage()
        .ok()
        .map(|u| (u.bytes_in_use, u.bytes_reserved))
}
