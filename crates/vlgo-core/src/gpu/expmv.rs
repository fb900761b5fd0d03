//! `expmv` on CubeCL backends: the route kernel, then the dense routes through the slot
//! interpreter and the Taylor routes through [`super::taylor`], all writing one output.
//!
//! The routes (kind, m, s, mu per matrix) stay on the device and are the forward's checkpoint:
//! the backward reads them instead of deciding again, so both take the same degree, steps, shift
//! and explicit-exponential choice, and the backward recomputes everything else.

use burn::tensor::{DType, Shape};
use burn_cubecl::cubecl;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{CubeRuntime, cubecl::prelude::*};
use cubecl::{CubeCount, CubeDim};

use super::kernels::{self, MAX_UNITS};
use super::taylor::{self, CHECKPOINTS, ROUTE_STRIDE, STAGED_FLOATS, STAGED_N};
use super::{
    Launch, MAX_GRID, buffer, empty, interpret, max_units, output, program, workspace_budget,
};
use crate::expm::expmv::INV_THETA_F32;
use crate::expm::plan::{self, Precision};
use crate::expm::{ExpmMethod, ExpmvConfig};

/// Largest n the `expmv` kernels take: five vectors of a cube live in shared memory, within the
/// 16 KiB that every WebGPU device offers.
pub const MAX_VECTOR_N: usize = 512;

/// Workspace of the dense routes' interpreter, which every `expmv` launches (its cubes skip the
/// other routes): its grid is what this many bytes of n x n slots allow, at least
/// [`DENSE_MIN_GRID`] cubes (within the launch's workspace budget), the device's limit for small
/// n. A large grid for small n keeps the walk of each cube short: software Vulkan stops a
/// shader's loops after 65 535 iterations in all (docs/expm.md), which a cube walking hundreds of
/// small dense matrices passed.
const DENSE_WORKSPACE_BYTES: usize = 32 << 20;
const DENSE_MIN_GRID: usize = 256;

/// Most cubes of the dense interpreter for `table`'s slots at n.
fn dense_grid(table: &program::Table, n: usize) -> usize {
    (DENSE_WORKSPACE_BYTES / (table.slots * n * n * 4).max(1)).max(DENSE_MIN_GRID)
}

/// Most cubes of the Taylor forward (it has no workspace).
const TAYLOR_GRID: usize = 65_535;

/// Whether the `expmv` kernels take A of this dtype and shape: f32 [N, n, n], 1 <= n <=
/// [`MAX_VECTOR_N`] (v must be f32 too).
pub fn expmv_takes(dtype: DType, shape: &Shape) -> bool {
    dtype == DType::F32
        && shape.num_dims() == 3
        && shape[1] == shape[2]
        && (1..=MAX_VECTOR_N).contains(&shape[1])
}

/// Launch geometry of the route and Taylor kernels.
#[derive(Debug, Clone, Copy)]
struct TaylorLayout {
    units: usize,
    /// Shared floats per vector (>= n; compile-time).
    vcap: usize,
    /// Shared floats for A: [`STAGED_FLOATS`] when staged, else 1 (compile-time).
    acap: usize,
    staged: bool,
    grid: usize,
}

impl TaylorLayout {
    /// `per_cube`: floats of global workspace each cube needs (0 for none).
    fn new<R: CubeRuntime>(
        client: &ComputeClient<R>,
        n: usize,
        count: usize,
        per_cube: usize,
    ) -> Self {
        let props = client.properties();
        // One unit per vector entry (a power of two: the norms reduce as a tree).
        let units = n.next_power_of_two().clamp(32, max_units(props));
        let vcap = n.next_power_of_two().max(64);
        // The backward's five vectors and the two reduction arrays share the budget with A.
        let need = (STAGED_FLOATS + 5 * vcap + 2 * MAX_UNITS) * 4;
        let staged = n <= STAGED_N && props.hardware.max_shared_memory_size >= need;
        let mut grid = count
            .min(TAYLOR_GRID)
            .min(props.hardware.max_cube_count.0 as usize);
        if per_cube > 0 {
            grid = grid
                .min(MAX_GRID)
                .min(workspace_budget(props) / (per_cube * 4));
        }
        Self {
            units,
            vcap,
            acap: if staged { STAGED_FLOATS } else { 1 },
            staged,
            grid: grid.max(1),
        }
    }

    fn cube_count(&self) -> CubeCount {
        CubeCount::Static(self.grid as u32, 1, 1)
    }

    fn cube_dim(&self) -> CubeDim {
        CubeDim::new_1d(self.units as u32)
    }
}

/// 1 / theta_m for m = 1..=m_max on the device, with m_max (the config's, within the table).
fn inv_theta_buffer<R: CubeRuntime>(
    like: &CubeTensor<R>,
    config: &ExpmvConfig,
) -> (CubeTensor<R>, usize) {
    let m_max = config.m_max.clamp(1, INV_THETA_F32.len());
    let bytes: Vec<u8> = INV_THETA_F32[..m_max]
        .iter()
        .flat_map(|&inv| (inv as f32).to_le_bytes())
        .collect();
    (buffer(like, &bytes, DType::F32), m_max)
}

/// Runs the route kernel over A [count, n, n] into `routes` [count, ROUTE_STRIDE].
fn route<R: CubeRuntime>(
    a: &CubeTensor<R>,
    routes: &CubeTensor<R>,
    layout: &TaylorLayout,
    config: &ExpmvConfig,
) {
    let n = a.meta.shape()[1];
    let (inv_thetas, m_max) = inv_theta_buffer(a, config);
    let pade_theta = plan::table(ExpmMethod::Pade, Precision::Single)
        .last()
        .map_or(1.0, |&(_, theta)| theta as f32);
    taylor::route_kernel::launch::<R>(
        &a.client,
        layout.cube_count(),
        layout.cube_dim(),
        a.clone().into_tensor_arg(),
        inv_thetas.into_array_arg(),
        routes.clone().into_array_arg(),
        n as u32,
        m_max as u32,
        u32::from(config.shift),
        u32::from(config.fallback),
        pade_theta,
        program::max_squarings(),
    );
}

/// y = exp(A) v for f32 A [N, n, n] and v [N, n] (see [`expmv_takes`]), with the routes
/// [N, 4] that [`expmv_backward`] takes.
pub fn expmv<R: CubeRuntime>(
    a: CubeTensor<R>,
    v: CubeTensor<R>,
    config: &ExpmvConfig,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let a = into_contiguous(a);
    let v = into_contiguous(v);
    let shape = a.meta.shape();
    let (count, n) = (shape[0], shape[1]);
    let y = output(&a, Shape::new([count, n]));
    let routes = output(&a, Shape::new([count, ROUTE_STRIDE]));
    if count == 0 {
        return (y, routes);
    }
    let layout = TaylorLayout::new(&a.client, n, count, 0);
    route(&a, &routes, &layout, config);
    let table = program::forward_table(ExpmMethod::Pade);
    let l = Launch::new(a.clone(), table, dense_grid(table, n));
    // SAFETY: the interpreter stays within its arguments and its loops are bounded (the
    // invariants on `kernels::run`); `Launch::new` sized every buffer and shared array.
    unsafe {
        interpret!(
            expmv_dense_kernel,
            l,
            [
                a.clone().into_tensor_arg(),
                v.clone().into_tensor_arg(),
                routes.clone().into_array_arg(),
                l.plan.into_array_arg()
            ],
            y.clone().into_tensor_arg()
        );
    }
    taylor::taylor_kernel::launch::<R>(
        &a.client,
        layout.cube_count(),
        layout.cube_dim(),
        a.clone().into_tensor_arg(),
        v.into_tensor_arg(),
        routes.clone().into_array_arg(),
        y.clone().into_tensor_arg(),
        n as u32,
        config.tol as f32,
        layout.acap,
        layout.vcap,
        layout.staged,
    );
    (y, routes)
}

/// The adjoints of [`expmv`] given the upstream gradient `grad` [N, n] and the forward's
/// `routes`: per matrix Abar (n x n) then vbar (n), as one [N, n * n + n] tensor.
pub fn expmv_backward<R: CubeRuntime>(
    a: CubeTensor<R>,
    v: CubeTensor<R>,
    grad: CubeTensor<R>,
    routes: CubeTensor<R>,
    config: &ExpmvConfig,
) -> CubeTensor<R> {
    let a = into_contiguous(a);
    let v = into_contiguous(v);
    let grad = into_contiguous(grad);
    let routes = into_contiguous(routes);
    let shape = a.meta.shape();
    let (count, n) = (shape[0], shape[1]);
    let out = output(&a, Shape::new([count, n * n + n]));
    if count == 0 {
        return out;
    }
    let table = program::frechet_table();
    let l = Launch::new(a.clone(), table, dense_grid(table, n));
    // SAFETY: the interpreter stays within its arguments and its loops are bounded (the
    // invariants on `kernels::run`); `Launch::new` sized every buffer and shared array.
    unsafe {
        interpret!(
            expmv_dense_backward_kernel,
            l,
            [
                a.clone().into_tensor_arg(),
                v.clone().into_tensor_arg(),
                grad.clone().into_tensor_arg(),
                routes.clone().into_array_arg(),
                l.plan.into_array_arg()
            ],
            out.clone().into_tensor_arg()
        );
    }
    let m_max = config.m_max.clamp(1, INV_THETA_F32.len());
    let per_cube = (2 * CHECKPOINTS + 2 * m_max) * n;
    let layout = TaylorLayout::new(&a.client, n, count, per_cube);
    let work = empty(&a, layout.grid * per_cube);
    taylor::taylor_backward_kernel::launch::<R>(
        &a.client,
        layout.cube_count(),
        layout.cube_dim(),
        a.clone().into_tensor_arg(),
        v.into_tensor_arg(),
        grad.into_tensor_arg(),
        routes.into_array_arg(),
        out.clone().into_tensor_arg(),
        work.into_array_arg(),
        n as u32,
        config.tol as f32,
        m_max as u32,
        layout.acap,
        layout.vcap,
        layout.staged,
    );
    out
}

/// Most coefficients per row that [`expmv_generated`] forms in the kernel.
pub const MAX_GENERATED_COEFFS: usize = 1024;

/// Compile-time shared sizes of the generating kernel for M coefficients and blocks of n:
/// (acap, ccap, vcap), or `None` where the device lacks the shared memory. Sizes round up to
/// powers of two, so a model's block size compiles one shader.
fn generated_geometry<R: CubeRuntime>(
    client: &ComputeClient<R>,
    m: usize,
    n: usize,
) -> Option<(usize, usize, usize)> {
    let rows = n.next_power_of_two();
    // Rows odd_stride(n) <= rows + 1 apart.
    let acap = rows * (rows + 1);
    let ccap = m.next_power_of_two().max(32);
    let vcap = rows.max(32);
    let need = (acap + 3 * vcap + 2 * MAX_UNITS + 2 * ccap + 1) * 4;
    let fits = n <= STAGED_N
        && m <= MAX_GENERATED_COEFFS
        && client.properties().hardware.max_shared_memory_size >= need;
    fits.then_some((acap, ccap, vcap))
}

/// Whether [`expmv_generated`] takes coefficients c [R, M] and generators psi [M, S, n, n] of
/// this dtype on this device: f32, n <= 64 and M <= [`MAX_GENERATED_COEFFS`], with shared
/// memory for A, the coefficients and three vectors.
pub fn generated_takes<R: CubeRuntime>(c: &CubeTensor<R>, psi: &CubeTensor<R>) -> bool {
    let shape = psi.meta.shape();
    c.dtype == DType::F32
        && psi.dtype == DType::F32
        && shape.num_dims() == 4
        && shape[2] == shape[3]
        && shape[2] >= 1
        && generated_geometry(&c.client, shape[0], shape[2]).is_some()
}

/// y_p = exp(A_p) v_p with A_p = sum_m c[r, m] psi[m, k] for the problems p = r S + k, formed in
/// the kernel and never in device memory: c [R, M], psi [M, S, n, n], v [R S, n] (f32, see
/// [`generated_takes`]). Forward only: the Taylor route for every finite generator.
///
/// # Panics
///
/// If the shapes do not agree or [`generated_takes`] refuses the inputs (callers check both;
/// `vlgo_core::expmv_generated` returns errors for the shapes).
pub fn expmv_generated<R: CubeRuntime>(
    c: CubeTensor<R>,
    psi: CubeTensor<R>,
    v: CubeTensor<R>,
    config: &ExpmvConfig,
) -> CubeTensor<R> {
    let c = into_contiguous(c);
    let psi = into_contiguous(psi);
    let v = into_contiguous(v);
    let shape = psi.meta.shape();
    let (m, blocks, n) = (shape[0], shape[1], shape[2]);
    let rows = c.meta.shape()[0];
    let count = v.meta.shape()[0];
    assert!(
        c.meta.shape()[1] == m && blocks >= 1 && v.meta.shape()[1] == n && count == rows * blocks,
        "expmv_generated: c [R, M], psi [M, S, n, n] (S >= 1) and v [R S, n] do not agree: \
         c {:?}, psi {:?}, v {:?}",
        c.meta.shape(),
        shape,
        v.meta.shape()
    );
    let y = output(&v, v.meta.shape().clone());
    let Some((acap, ccap, vcap)) = generated_geometry(&c.client, m, n) else {
        panic!("expmv_generated takes what generated_takes accepts (M = {m}, n = {n})");
    };
    if count == 0 {
        return y;
    }
    let (inv_thetas, m_max) = inv_theta_buffer(&c, config);
    let layout = TaylorLayout::new(&c.client, n, count, 0);
    taylor::generated_taylor_kernel::launch::<R>(
        &c.client,
        layout.cube_count(),
        layout.cube_dim(),
        c.clone().into_tensor_arg(),
        psi.into_tensor_arg(),
        v.into_tensor_arg(),
        inv_thetas.into_array_arg(),
        y.clone().into_tensor_arg(),
        n as u32,
        blocks as u32,
        m_max as u32,
        u32::from(config.shift),
        config.tol as f32,
        acap,
        ccap,
        vcap,
    );
    y
}
