//! The exponential on CubeCL backends (`wgpu`, `cuda`): our own kernels, one cube per matrix.
//!
//! * [`expm`]: Padé [m/m] (m in {3, 5, 7}, in-kernel Gauss-Jordan with partial pivoting) or
//!   Bader-Blanes-Casas Taylor (degrees 1 to 18), then the squarings: the schemes and degree
//!   tables of the tensor-op path, compiled into slot programs (`program`) that the kernels
//!   interpret. Degree and scaling are chosen per matrix on the device, by the kernel itself
//!   from the matrix it has loaded: no host synchronisation and no second read of A.
//! * [`expm_backward`]: the adjoint of A, L(A^T, G), by forward-mode differentiation of the
//!   Taylor scheme and its squarings, which recomputes the forward in the same kernel and stores
//!   nothing between the passes. Both forward methods use it: each approximates exp to the f32
//!   bar, so the gradient of either is L(A^T, G) to that accuracy.
//! * [`expm_checkpointed`] / [`expm_backward_checkpointed`]: what autodiff runs for Taylor. The
//!   forward also keeps its plan and the scheme's values that the derivative reads
//!   ([`checkpoint_floats`]); the backward loads them and computes tangents alone (two products
//!   per product of the scheme where [`expm_backward`] takes three, no second planning, and as
//!   few slots as the forward), with the forward's degree and s.
//!   [`CHECKPOINT_VAR`] = `0` keeps the recomputing backward.
//!
//! * [`expmv`] / [`expmv_backward`]: exp(A) v by the truncated Taylor series with shift and early
//!   termination, per matrix the same route as the CPU and tensor-op paths (the explicit
//!   exponential where that is cheaper), and its checkpointed adjoint (module `taylor`). The
//!   routes stay on the device and are the forward's checkpoint.
//! * [`expmv_generated`]: exp(A) v for generators A = sum_m c_m Psi_m formed inside the kernel
//!   from the coefficients and the dictionary, so that they never exist in device memory
//!   (forward only; the Taylor route for every finite generator). It reads M n^2 dictionary
//!   entries per problem where a matmul reuses them across the batch, so it is the memory-lean
//!   choice (`TransportMethod::Generated`), not the default.
//!
//! A cube walks through its share of the batch (the grid is capped), so the workspace is a fixed
//! number of n x n slots (or vectors) per cube whatever the batch size. Inputs other than f32
//! [N, n, n] with 1 <= n <= [`MAX_N`] ([`MAX_VECTOR_N`] for `expmv`) keep the tensor-op path
//! (f64 is the oracle there).

#[cfg(all(test, feature = "cuda", feature = "wgpu"))]
mod cuda_host;
#[cfg(feature = "cuda")]
mod cuda_source;
mod expmv;
mod kernels;
mod program;
mod taylor;

pub use expmv::{
    MAX_GENERATED_COEFFS, MAX_VECTOR_N, expmv, expmv_backward, expmv_generated, expmv_takes,
    generated_takes,
};
pub(crate) use taylor::ROUTE_STRIDE;

#[cfg(feature = "cuda")]
pub use cuda_source::{CudaTarget, KernelSource, cuda_sources};

use std::sync::OnceLock;

use burn::tensor::{DType, Shape};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeRuntime, cubecl::prelude::*};
use cubecl::ir::DeviceProperties;
use cubecl::{CubeCount, CubeDim};

use crate::expm::ExpmMethod;
use kernels::MAX_UNITS;
use program::Table;

/// Largest matrix size the kernels take (a k-slab of one column, 2 n floats, and the solve's n
/// multipliers must fit the 16 KiB of shared memory that every WebGPU device offers).
pub const MAX_N: usize = 1024;

/// Most cubes launched; each walks through the matrices `cube, cube + grid, ...`.
const MAX_GRID: usize = 1024;

/// Cap of the workspace in bytes (also at most half the largest buffer the device allows).
const WORKSPACE_BYTES: usize = 256 << 20;

/// Most shared memory a cube plans for (less where the device offers less: WebGPU guarantees
/// only 16 KiB per workgroup); more would cost resident cubes per multiprocessor.
const SHARED_BYTES: usize = 48 << 10;

/// Bytes of shared memory kept free beside resident slots (alignment of the shared arrays).
const SHARED_MARGIN: usize = 512;

/// Environment variable: the most bytes of shared memory a cube may hold its slots in (default
/// the device's maximum; 0 keeps the slots in device memory). For benchmarks and diagnosis.
pub const RESIDENT_BYTES_VAR: &str = "VLGO_GPU_RESIDENT_BYTES";

/// Environment variable: `0` keeps the interpreter's products and combinations on scalar reads
/// where they would read four floats at a time (on CUDA, with resident slots and n a multiple of
/// 4). Read once per process. For benchmarks and diagnosis.
pub const WIDE_VAR: &str = "VLGO_GPU_WIDE";

/// Environment variable: `0` makes the Taylor forward under autodiff keep no checkpoint, so that
/// the backward recomputes the scheme's products (three products per product instead of two,
/// and planning again), for A/B runs and where memory is short. Read once per process.
pub const CHECKPOINT_VAR: &str = "VLGO_GPU_CHECKPOINT";

/// Whether the interpreter may read resident slots four floats at a time on this backend:
/// CubeCL reinterprets shared memory as vectors on CUDA only (not on WebGPU), and
/// [`WIDE_VAR`] = `0` turns it off.
fn wide_reads<R: CubeRuntime>(client: &ComputeClient<R>) -> bool {
    wide_allowed() && R::name(client) == "cuda"
}

/// Whether [`WIDE_VAR`] allows wide reads where the backend has them.
fn wide_allowed() -> bool {
    static WIDE: OnceLock<Option<usize>> = OnceLock::new();
    setting(&WIDE, WIDE_VAR) != Some(0)
}

/// Shared memory a cube may hold its slots in: the device's maximum, or less where
/// [`RESIDENT_BYTES_VAR`] says so (a value that is not a byte count is ignored).
fn resident_limit(device_max: usize) -> usize {
    static LIMIT: OnceLock<Option<usize>> = OnceLock::new();
    setting(&LIMIT, RESIDENT_BYTES_VAR).map_or(device_max, |limit| limit.min(device_max))
}

/// The number in environment variable `var`, read once per process into `cell` (`None` where
/// it is unset or not a number).
fn setting(cell: &OnceLock<Option<usize>>, var: &str) -> Option<usize> {
    *cell.get_or_init(|| std::env::var(var).ok().and_then(|v| v.trim().parse().ok()))
}

/// Floats of the checkpoint that [`expm_checkpointed`] keeps for A of `shape` and `dtype` (per
/// matrix its plan and the Taylor scheme's values that the derivative reads: seven n x n
/// matrices and 4 floats), or
/// `None` where it keeps none: Padé (its backward
/// differentiates the Taylor scheme), input the kernels do not take, an empty batch, a
/// checkpoint larger than half a buffer of the device or of 2^31 - 1 floats or more (the kernels
/// index with 32 bits: about 74,800 matrices of 64 x 64), or [`CHECKPOINT_VAR`] = `0`.
pub fn checkpoint_floats<R: CubeRuntime>(
    client: &ComputeClient<R>,
    dtype: DType,
    shape: &Shape,
    method: ExpmMethod,
) -> Option<usize> {
    static OFF: OnceLock<Option<usize>> = OnceLock::new();
    if method != ExpmMethod::Taylor || !takes::<R>(dtype, shape) || shape[0] == 0 {
        return None;
    }
    if setting(&OFF, CHECKPOINT_VAR) == Some(0) {
        return None;
    }
    let floats = kernels::checkpoint_len(shape[0], shape[1]);
    // The checkpoint and the workspace (at most half a buffer) share one buffer.
    let fits = (floats as u64)
        .checked_mul(4)
        .is_some_and(|bytes| bytes <= client.properties().memory.max_page_size / 2)
        && floats < (u32::MAX / 2) as usize;
    fits.then_some(floats)
}

/// Calls `kernels::$kernel::launch_unchecked` for the [`Launch`] `$l`: the leading arguments
/// (A, the kernel's other inputs, and the plans last), then what every interpreter kernel takes
/// after them in this order: the program tables, the output `$out`, the workspace and the layout.
/// The call is unsafe: its caller says why the interpreter's invariants hold.
macro_rules! interpret {
    ($kernel:ident, $l:ident, [$($lead:expr),* $(,)?], $out:expr) => {
        kernels::$kernel::launch_unchecked::<R>(
            &$l.a.client,
            $l.layout.cube_count(),
            $l.layout.cube_dim(),
            $($lead,)*
            $l.ops.into_array_arg(),
            $l.vals.into_array_arg(),
            $out,
            $l.work.into_array_arg(),
            $l.layout.n as u32,
            $l.slots,
            $l.layout.slab,
            $l.layout.cap,
            $l.layout.resident,
            $l.layout.wide,
        )
    };
}
use interpret;

/// Whether the kernels take this tensor: f32 [N, n, n] with 1 <= n <= [`MAX_N`].
pub fn accepts<R: CubeRuntime>(a: &CubeTensor<R>) -> bool {
    takes::<R>(a.dtype, a.meta.shape())
}

/// [`accepts`] from a dtype and shape, for wrappers (fusion) that hold no `CubeTensor`.
pub fn takes<R: CubeRuntime>(dtype: DType, shape: &Shape) -> bool {
    dtype == DType::F32
        && shape.num_dims() == 3
        && shape[1] == shape[2]
        && (1..=MAX_N).contains(&shape[1])
}

/// Most units per cube on this device, as a power of two from 32 to [`MAX_UNITS`] (the kernels'
/// reductions are trees over the units).
fn max_units(props: &DeviceProperties) -> usize {
    let units = (props.hardware.max_units_per_cube as usize).clamp(32, MAX_UNITS);
    1 << units.ilog2()
}

/// Bytes a launch may take for its workspace on this device.
fn workspace_budget(props: &DeviceProperties) -> usize {
    WORKSPACE_BYTES.min(props.memory.max_page_size as usize / 2)
}

/// Launch geometry for [count, n, n] with `slots` workspace matrices per cube.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    n: usize,
    /// Floats of each operand's k-slab in shared memory (compile-time in the kernels); 0 where
    /// the slots are resident.
    slab: usize,
    /// Room for the solve's multipliers, >= n (compile-time in the kernels); 0 where the
    /// programs have no solve.
    cap: usize,
    /// Floats of shared memory holding the cube's slots (compile-time in the kernels), or 0 for
    /// slots in the device-memory workspace.
    resident: usize,
    /// Whether products and combinations read and write the resident slots four floats at a
    /// time (compile-time in the kernels): n a multiple of 4 on a backend that allows it.
    wide: bool,
    /// Units per cube (a power of two from 32 to [`MAX_UNITS`]).
    units: usize,
    /// Cubes launched.
    grid: usize,
}

impl Layout {
    fn new<R: CubeRuntime>(
        client: &ComputeClient<R>,
        n: usize,
        count: usize,
        table: &Table,
    ) -> Self {
        Self::for_device(client.properties(), wide_reads(client), n, count, table)
    }

    /// The layout on a device of properties `props`, where `wide_reads` says whether the
    /// backend reads shared memory four floats at a time.
    fn for_device(
        props: &DeviceProperties,
        wide_reads: bool,
        n: usize,
        count: usize,
        table: &Table,
    ) -> Self {
        // Shared-memory sizes are compile-time: every n up to 64 shares them, larger n round up
        // to a power of two. (The workgroup size, 32 to 256 units by n, is part of a shader too.)
        let cap = if table.solves {
            n.next_power_of_two().max(64)
        } else {
            0
        };
        let solve_bytes = if table.solves {
            cap * 4 + MAX_UNITS * 8
        } else {
            0
        };
        // Slots in shared memory where they fit: the products then read their operands in
        // place, and no slot travels through device memory. The size rounds up to a power of
        // two of n^2 per slot, so that few shaders serve all n.
        let resident_floats = table.slots * (n * n).next_power_of_two();
        let resident = if resident_floats * 4 + solve_bytes + SHARED_MARGIN
            <= resident_limit(props.hardware.max_shared_memory_size)
        {
            resident_floats
        } else {
            0
        };
        let shared = props.hardware.max_shared_memory_size.min(SHARED_BYTES);
        // The multipliers and the pivot search's two per-unit arrays share the budget with the
        // two slabs; slabs wider than 32 columns of the largest n gain nothing.
        let room = shared.saturating_sub(cap.max(64) * 4 + MAX_UNITS * 8 + 256) / 8;
        let slab = if resident > 0 {
            0
        } else {
            (1usize << room.max(1).ilog2())
                .min(n.next_power_of_two().max(64) * 32)
                .max(n)
        };
        let wide = resident > 0 && n.is_multiple_of(4) && wide_reads;
        let tiles = n.div_ceil(4).pow(2);
        // A power of two (the pivot search is a tree over the units), one unit per 4 x 4 tile.
        let units = tiles.next_power_of_two().clamp(32, max_units(props));
        let per_cube = table.slots * n * n * 4;
        // `count` arrives capped by the caller's grid limit.
        let grid = count
            .min(workspace_budget(props) / per_cube)
            .min(props.hardware.max_cube_count.0 as usize)
            .max(1);
        Self {
            n,
            slab,
            cap,
            resident,
            wide,
            units,
            grid,
        }
    }

    /// Floats of the device-memory workspace a launch needs.
    fn workspace(&self, slots: usize) -> usize {
        if self.resident > 0 {
            1
        } else {
            self.grid * slots * self.n * self.n
        }
    }

    fn cube_count(&self) -> CubeCount {
        CubeCount::Static(self.grid as u32, 1, 1)
    }

    fn cube_dim(&self) -> CubeDim {
        CubeDim::new_1d(self.units as u32)
    }
}

/// A device buffer of `len` 4-byte values (f32 or u32), for the kernels' tables.
fn buffer<R: CubeRuntime>(like: &CubeTensor<R>, bytes: &[u8], dtype: DType) -> CubeTensor<R> {
    let handle = like.client.create_from_slice(bytes);
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::new([bytes.len() / 4]),
        handle,
        dtype,
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

/// Where a launch's per-matrix plans come from.
enum Plans<R: CubeRuntime> {
    /// The interpreter itself, from the 1-norm of the matrix it loads (A, or A^T in the
    /// derivatives) and the table's planning table.
    Here,
    /// A checkpoint of [`expm_checkpointed`], which starts with the forward's plans.
    Checkpoint(Box<CubeTensor<R>>),
}

/// What the interpreter kernels need: the contiguous input, layout, plans and program tables.
struct Launch<R: CubeRuntime> {
    a: CubeTensor<R>,
    layout: Layout,
    /// The planning table ([`Plans::Here`]) or the checkpoint.
    plan: CubeTensor<R>,
    ops: CubeTensor<R>,
    vals: CubeTensor<R>,
    work: CubeTensor<R>,
    slots: u32,
}

impl<R: CubeRuntime> Launch<R> {
    /// Plans a launch over a contiguous, non-empty A [count, n, n] with at most `max_grid` cubes,
    /// whose kernel plans each matrix itself.
    fn new(a: CubeTensor<R>, table: &Table, max_grid: usize) -> Self {
        Self::with(a, table, Plans::Here, max_grid, 0)
    }

    /// [`Launch::new`] with the plans from `plans` (in `plan`), and `reserve` floats of `work`
    /// ahead of the workspace (the checkpointing forward's checkpoint).
    fn with(
        a: CubeTensor<R>,
        table: &Table,
        plans: Plans<R>,
        max_grid: usize,
        reserve: usize,
    ) -> Self {
        let shape = a.meta.shape();
        let (count, n) = (shape[0], shape[1]);
        let layout = Layout::new(&a.client, n, count.min(max_grid), table);
        let plan = match plans {
            Plans::Here => {
                // The kernel's planning sums columns in the slots after the first.
                assert!(table.slots >= 3, "{} slots", table.slots);
                buffer(&a, &table.plan_bytes, DType::F32)
            }
            Plans::Checkpoint(checkpoint) => *checkpoint,
        };
        let ops = buffer(&a, &table.ops_bytes, DType::U32);
        let vals = buffer(&a, &table.vals_bytes, DType::F32);
        let work = empty(&a, reserve + layout.workspace(table.slots));
        Self {
            a,
            layout,
            plan,
            ops,
            vals,
            work,
            slots: table.slots as u32,
        }
    }
}

/// An uninitialised f32 tensor of `shape` on A's device.
fn output<R: CubeRuntime>(like: &CubeTensor<R>, shape: Shape) -> CubeTensor<R> {
    empty_device_contiguous_dtype(like.client.clone(), like.device.clone(), shape, DType::F32)
}

/// exp(A) for f32 A [N, n, n] (see [`accepts`]).
pub fn expm<R: CubeRuntime>(a: CubeTensor<R>, method: ExpmMethod) -> CubeTensor<R> {
    let a = into_contiguous(a);
    let out = output(&a, a.meta.shape().clone());
    if a.meta.shape()[0] == 0 {
        return out;
    }
    let l = Launch::new(a, program::forward_table(method), MAX_GRID);
    // SAFETY: the interpreter stays within its arguments and its loops are bounded (the
    // invariants on `kernels::run`); `Launch::new` sized every buffer and shared array.
    unsafe {
        interpret!(
            expm_kernel,
            l,
            [l.a.clone().into_tensor_arg(), l.plan.into_array_arg()],
            out.clone().into_tensor_arg()
        );
    }
    out
}

/// exp(A) by Taylor together with the checkpoint of its derivative: per matrix its plan, the
/// operands of the scheme's products and its result before the squarings
/// ([`checkpoint_floats`], which must be `Some`).
///
/// The checkpoint is the first part of the launch's `work` buffer, whose remainder (where the
/// slots do not fit in shared memory) was the kernel's workspace: that memory is held until the
/// checkpoint is dropped. exp(A) is a tensor of its own.
///
/// # Panics
///
/// If the kernels do not take `a` ([`accepts`]).
pub fn expm_checkpointed<R: CubeRuntime>(a: CubeTensor<R>) -> (CubeTensor<R>, CubeTensor<R>) {
    assert!(accepts(&a), "f32 [N, n, n] with 1 <= n <= {MAX_N}");
    let a = into_contiguous(a);
    let shape = a.meta.shape().clone();
    let (count, n) = (shape[0], shape[1]);
    let floats = kernels::checkpoint_len(count, n);
    let out = output(&a, shape);
    if count == 0 {
        return (out, empty(&a, 0));
    }
    let l = Launch::with(a, program::saving_table(), Plans::Here, MAX_GRID, floats);
    let work = l.work.clone();
    // SAFETY: the interpreter stays within its arguments and its loops are bounded (the
    // invariants on `kernels::run`); `Launch::with` sized every buffer and shared array,
    // `work` with the checkpoint's floats ahead of the workspace.
    unsafe {
        interpret!(
            expm_saving_kernel,
            l,
            [l.a.clone().into_tensor_arg(), l.plan.into_array_arg()],
            out.clone().into_tensor_arg()
        );
    }
    let rest = ((work.meta.shape().num_elements() - floats) * 4) as u64;
    let checkpoint = CubeTensor::new_contiguous(
        work.client.clone(),
        work.device.clone(),
        Shape::new([floats]),
        work.handle.clone().offset_end(rest),
        DType::F32,
    );
    (out, checkpoint)
}

/// The adjoint of A given the adjoint `grad` of exp(A) and the checkpoint of
/// [`expm_checkpointed`]: L(A, G^T)^T with the forward's plan, by the tangents alone over the
/// saved values: two products per product of the scheme (where [`expm_backward`] takes three),
/// no second planning, and no more slots than the forward.
///
/// # Panics
///
/// If the kernels do not take `a` ([`accepts`]), `grad` is not f32 of A's shape, or
/// `checkpoint` is not the f32 checkpoint of an exponential of A's shape.
pub fn expm_backward_checkpointed<R: CubeRuntime>(
    a: CubeTensor<R>,
    grad: CubeTensor<R>,
    checkpoint: CubeTensor<R>,
) -> CubeTensor<R> {
    assert!(accepts(&a), "f32 [N, n, n] with 1 <= n <= {MAX_N}");
    assert!(
        grad.dtype == DType::F32 && grad.meta.shape() == a.meta.shape(),
        "the upstream gradient: f32 of A's shape"
    );
    let (count, n) = (a.meta.shape()[0], a.meta.shape()[1]);
    assert!(
        checkpoint.dtype == DType::F32
            && checkpoint.meta.shape().num_elements() == kernels::checkpoint_len(count, n),
        "the checkpoint of an exponential of {count} matrices {n} x {n}"
    );
    let a = into_contiguous(a);
    let out = output(&a, a.meta.shape().clone());
    if count == 0 {
        return out;
    }
    let l = Launch::with(
        a,
        program::frechet_saved_table(),
        Plans::Checkpoint(Box::new(checkpoint)),
        MAX_GRID,
        0,
    );
    let grad = into_contiguous(grad);
    // SAFETY: as `expm_backward`; the checkpoint, in `l.plan`, holds `checkpoint_len(count, n)`
    // floats (checked above).
    unsafe {
        interpret!(
            frechet_saved_kernel,
            l,
            [
                l.a.clone().into_tensor_arg(),
                grad.into_tensor_arg(),
                l.plan.into_tensor_arg()
            ],
            out.clone().into_tensor_arg()
        );
    }
    out
}

/// The adjoint of A given the adjoint `grad` of exp(A), for f32 A [N, n, n].
pub fn expm_backward<R: CubeRuntime>(a: CubeTensor<R>, grad: CubeTensor<R>) -> CubeTensor<R> {
    let a = into_contiguous(a);
    let out = output(&a, a.meta.shape().clone());
    if a.meta.shape()[0] == 0 {
        return out;
    }
    let l = Launch::new(a, program::frechet_table(), MAX_GRID);
    let grad = into_contiguous(grad);
    // SAFETY: the interpreter stays within its arguments and its loops are bounded (the
    // invariants on `kernels::run`); `Launch::new` sized every buffer and shared array.
    unsafe {
        interpret!(
            frechet_kernel,
            l,
            [
                l.a.clone().into_tensor_arg(),
                grad.into_tensor_arg(),
                l.plan.into_array_arg()
            ],
            out.clone().into_tensor_arg()
        );
    }
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
