//! The kernels the host launches: the exponential, its Fréchet adjoint (with and without a checkpoint), and the dense route of `expmv` and its adjoint.

// Kernel signatures carry the workspace offsets and layout explicitly; `std::mem::swap` does not
// exist in `#[cube]` code.
#![allow(clippy::too_many_arguments, clippy::manual_swap)]

use burn_cubecl::cubecl;
use cubecl::prelude::*;

use super::interpreter::{
    MODE_DENSE, MODE_DENSE_BACKWARD, MODE_EXPM, MODE_EXPM_SAVE, MODE_FRECHET, MODE_FRECHET_SAVED,
    run,
};
#[allow(unused_imports)]
use super::*;

/// exp(A) for a batch [count, n, n], each matrix with its own degree and squarings from the
/// planning table `plan`.
///
/// `slab` floats of shared memory per operand slab and `cap` >= n multipliers of the solve are
/// the only compile-time arguments (with the workgroup size of the launch).
#[cube(launch_unchecked)]
pub(crate) fn expm_kernel(
    a: &Tensor<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a, a, a, a, plan, plan, ops, vals, out, work, n, slots, slab, cap, resident, wide,
        MODE_EXPM,
    );
}

/// The Fréchet derivative L(A^T, G) of exp, which is the adjoint of A for the upstream
/// gradient G: forward mode through the Taylor scheme and the squarings at X = 2^-s A^T,
/// E = 2^-s G (the plan's degree and s come from ||A^T||_1).
#[cube(launch_unchecked)]
pub(crate) fn frechet_kernel(
    a: &Tensor<f32>,
    g: &Tensor<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        g,
        a,
        g,
        plan,
        plan,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_FRECHET,
    );
}

/// exp(A) by Taylor into `out`, with the checkpoint of its derivative (per matrix its plan and
/// the scheme's values that the derivative reads, [`checkpoint_len`] floats) at the start of
/// `work`.
#[cube(launch_unchecked)]
pub(crate) fn expm_saving_kernel(
    a: &Tensor<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        a,
        a,
        a,
        plan,
        plan,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_EXPM_SAVE,
    );
}

/// L(A^T, G) from the checkpoint `saved` of [`expm_saving_kernel`]: its plans and values, the
/// tangents alone (two products per product of the scheme where [`frechet_kernel`] takes
/// three), and no planning.
#[cube(launch_unchecked)]
pub(crate) fn frechet_saved_kernel(
    a: &Tensor<f32>,
    g: &Tensor<f32>,
    saved: &Tensor<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        g,
        saved,
        g,
        vals,
        vals,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_FRECHET_SAVED,
    );
}

/// exp(A) v for the matrices that `expmv` routes to the explicit exponential (Padé), into
/// out [N, n]; the Taylor kernel writes the others.
#[cube(launch_unchecked)]
pub(crate) fn expmv_dense_kernel(
    a: &Tensor<f32>,
    v: &Tensor<f32>,
    routes: &Array<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a, a, v, v, routes, plan, ops, vals, out, work, n, slots, slab, cap, resident, wide,
        MODE_DENSE,
    );
}

/// The adjoints of the matrices that `expmv` routed to the explicit exponential: per matrix
/// Abar = L(A^T, g v^T) and vbar = exp(A)^T g into out [N, n * n + n].
#[cube(launch_unchecked)]
pub(crate) fn expmv_dense_backward_kernel(
    a: &Tensor<f32>,
    v: &Tensor<f32>,
    g: &Tensor<f32>,
    routes: &Array<f32>,
    plan: &Array<f32>,
    ops: &Array<u32>,
    vals: &Array<f32>,
    out: &mut Tensor<f32>,
    work: &mut Array<f32>,
    n: u32,
    slots: u32,
    #[comptime] slab: usize,
    #[comptime] cap: usize,
    #[comptime] resident: usize,
    #[comptime] wide: bool,
) {
    run(
        a,
        a,
        v,
        g,
        routes,
        plan,
        ops,
        vals,
        out,
        work,
        n,
        slots,
        slab,
        cap,
        resident,
        wide,
        MODE_DENSE_BACKWARD,
    );
}
