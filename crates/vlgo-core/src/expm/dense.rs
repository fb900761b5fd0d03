//! The explicit exponential from tensor ops: scaling, a Padé or Taylor scheme per degree group,
//! the solve, and the squarings; and its reverse mode (`expm.md`, "Gradients").
//!
//! Runs on every backend. Fast kernels replace it behind [`ExpmBackend`](super::ExpmBackend).

use burn::prelude::*;

use super::ExpmMethod;
use super::plan::{ExpmPlan, Precision};
use super::scheme::{self, Program};
use super::solve::solve;

/// Working precision of a tensor: f64 computes with the f64 tables, everything else with f32's.
pub(crate) fn precision_of<B: Backend, const D: usize>(t: &Tensor<B, D>) -> Precision {
    if t.dtype() == burn::tensor::DType::F64 {
        Precision::Double
    } else {
        Precision::Single
    }
}

/// Matrix 1-norms (maximum absolute column sum) of a batch, read back to the host; NaN for a
/// matrix holding NaN or Inf.
///
/// Non-finite entries are detected through the total absolute sum, not the maximum: some GPU
/// backends (WGSL allows assuming no NaN) drop NaN in `max` and fold `is_nan` to false, while
/// sums still carry it.
pub(crate) fn one_norms<B: Backend>(a: Tensor<B, 3>) -> Vec<f64> {
    let [batch, _, _] = a.dims();
    let columns = a.abs().sum_dim(1); // [N, 1, n]
    let stats = Tensor::cat(
        vec![
            columns.clone().max_dim(2).reshape([batch, 1]),
            columns.sum_dim(2).reshape([batch, 1]),
        ],
        1,
    )
    .into_data()
    .convert::<f64>()
    .to_vec::<f64>()
    .expect("a float tensor converts to f64");
    stats
        .chunks(2)
        .map(|s| if s[1].is_finite() { s[0] } else { f64::NAN })
        .collect()
}

/// Sets the matrices at `indices` (original batch order) to NaN. Used for non-finite inputs so
/// that NaN in gives NaN out on every backend, whatever the backend's own NaN arithmetic does.
pub(crate) fn poison<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    indices: &[usize],
) -> Tensor<B, D> {
    if indices.is_empty() {
        return t;
    }
    let dims = t.dims();
    let mut flags = vec![0f32; dims[0]];
    for &i in indices {
        flags[i] = 1.0;
    }
    let mut shape = [1usize; D];
    shape[0] = dims[0];
    // From float flags rather than bool data, which not every backend reads (Candle's
    // `bool_from_data` takes only u8).
    let mask = Tensor::<B, 1>::from_data(TensorData::new(flags, [dims[0]]), &t.device())
        .greater_elem(0.5)
        .reshape(shape)
        .expand(dims);
    t.mask_fill(mask, f64::NAN)
}

/// Plans a batch: per-matrix degree and scaling from the 1-norms.
pub(crate) fn plan<B: Backend>(a: &Tensor<B, 3>, method: ExpmMethod) -> ExpmPlan {
    ExpmPlan::new(&one_norms(a.clone()), method, precision_of(a))
}

/// Tensor of per-matrix factors [N, 1, 1] in `like`'s dtype.
pub(crate) fn per_matrix<B: Backend>(values: Vec<f64>, like: &Tensor<B, 3>) -> Tensor<B, 3> {
    let n = values.len();
    Tensor::<B, 1>::from_data(TensorData::new(values, [n]), (&like.device(), like.dtype()))
        .reshape([n, 1, 1])
}

fn index_tensor<B: Backend>(indices: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let data: Vec<i64> = indices.iter().map(|&i| i as i64).collect();
    Tensor::from_data(TensorData::new(data, [indices.len()]), device)
}

/// Reorders the batch dimension: `out[k] = t[order[k]]`.
pub(crate) fn reorder<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    order: &[usize],
) -> Tensor<B, D> {
    let device = t.device();
    t.select(0, index_tensor::<B>(order, &device))
}

fn program(method: ExpmMethod, degree: usize) -> Program {
    match method {
        ExpmMethod::Pade => scheme::pade(degree),
        ExpmMethod::Taylor => scheme::taylor(degree),
    }
}

/// The unsquared approximant for one degree group: r_m(X) (Padé) or T_m(X) (Taylor).
fn approximant<B: Backend>(program: &Program, x: Tensor<B, 3>) -> Tensor<B, 3> {
    let values = scheme::evaluate(program, x);
    let (u, v) = program.outputs;
    if program.pade {
        let (u, v) = (values[u].clone(), values[v].clone());
        solve(v.clone() - u.clone(), v + u)
    } else {
        values[u].clone()
    }
}

/// Scaled and sorted input: X = 2^-s A in plan order.
fn scaled_sorted<B: Backend>(a: Tensor<B, 3>, plan: &ExpmPlan) -> Tensor<B, 3> {
    let a = if plan.is_identity() {
        a
    } else {
        reorder(a, &plan.order)
    };
    if plan.max_squarings() == 0 {
        return a;
    }
    let scale = plan
        .squarings
        .iter()
        .map(|&s| (-(s as f64)).exp2())
        .collect();
    let scale = per_matrix(scale, &a);
    a * scale
}

/// Approximants of every degree group, in plan order.
fn approximants<B: Backend>(x: Tensor<B, 3>, plan: &ExpmPlan) -> Tensor<B, 3> {
    let [batch, n, _] = x.dims();
    let parts: Vec<Tensor<B, 3>> = plan
        .groups
        .iter()
        .map(|&(degree, start, end)| {
            let xg = if plan.groups.len() == 1 {
                x.clone()
            } else {
                x.clone().slice([start..end, 0..n, 0..n])
            };
            approximant(&program(plan.method, degree), xg)
        })
        .collect();
    debug_assert_eq!(parts.iter().map(|p| p.dims()[0]).sum::<usize>(), batch);
    if parts.len() == 1 {
        parts.into_iter().next().expect("one group")
    } else {
        Tensor::cat(parts, 0)
    }
}

/// Squares the prefix of matrices that still need it at step k; calls `keep` with the value
/// before squaring (the backward stores it).
fn square_all<B: Backend>(
    mut r: Tensor<B, 3>,
    plan: &ExpmPlan,
    mut keep: impl FnMut(Tensor<B, 3>),
) -> Tensor<B, 3> {
    let [batch, n, _] = r.dims();
    for k in 0..plan.max_squarings() {
        let active = plan.active_at(k);
        if active == batch {
            keep(r.clone());
            r = r.clone().matmul(r);
        } else {
            let head = r.clone().slice([0..active, 0..n, 0..n]);
            keep(head.clone());
            r = r.slice_assign([0..active, 0..n, 0..n], head.clone().matmul(head));
        }
    }
    r
}

/// Undoes [`reorder`] by `order`: `out[order[k]] = t[k]`.
pub(crate) fn unsort_by<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    order: &[usize],
) -> Tensor<B, D> {
    if order.iter().enumerate().all(|(k, &i)| k == i) {
        return t;
    }
    reorder(t, &super::plan::inverse_permutation(order))
}

/// exp(A) for a batch [N, n, n] in A's dtype (f32 or f64), with a precomputed plan.
pub(crate) fn expm_planned<B: Backend>(a: Tensor<B, 3>, plan: &ExpmPlan) -> Tensor<B, 3> {
    if a.dims()[0] == 0 {
        return a;
    }
    let x = scaled_sorted(a, plan);
    let r = approximants(x, plan);
    let r = square_all(r, plan, |_| {});
    poison(unsort_by(r, &plan.order), &plan.non_finite)
}

/// exp(A) for a batch [N, n, n] in A's dtype (f32 or f64).
pub(crate) fn expm_forward<B: Backend>(a: Tensor<B, 3>, method: ExpmMethod) -> Tensor<B, 3> {
    if a.dims()[0] == 0 {
        return a;
    }
    let plan = plan(&a, method);
    expm_planned(a, &plan)
}

/// Reverse mode of [`expm_planned`]: the adjoint of A given the adjoint `grad` of exp(A).
///
/// Recomputes the forward intermediates (the scheme's values and the s squaring inputs) and runs
/// back through the squarings (Ybar_k = Ybar_{k+1} Y_k^T + Y_k^T Ybar_{k+1}), the solve
/// (Pbar = Q^{-T} Xbar, Qbar = -Pbar X^T) and the scheme. Linear in `grad`, so the result's
/// relative accuracy does not depend on the gradient's scale.
pub(crate) fn expm_backward<B: Backend>(
    a: Tensor<B, 3>,
    grad: Tensor<B, 3>,
    plan: &ExpmPlan,
) -> Tensor<B, 3> {
    let [batch, n, _] = a.dims();
    if batch == 0 {
        return a;
    }
    let x = scaled_sorted(a, plan);
    let mut grad = if plan.is_identity() {
        grad
    } else {
        reorder(grad, &plan.order)
    };

    // Forward again, keeping what the reverse pass needs.
    let mut group_values = Vec::with_capacity(plan.groups.len());
    let mut group_results = Vec::with_capacity(plan.groups.len());
    for &(degree, start, end) in &plan.groups {
        let program = program(plan.method, degree);
        let xg = x.clone().slice([start..end, 0..n, 0..n]);
        let values = scheme::evaluate(&program, xg);
        let r = if program.pade {
            let (u, v) = (
                values[program.outputs.0].clone(),
                values[program.outputs.1].clone(),
            );
            solve(v.clone() - u.clone(), v + u)
        } else {
            values[program.outputs.0].clone()
        };
        group_results.push(r);
        group_values.push((program, values));
    }
    let r0 = Tensor::cat(group_results.clone(), 0);
    let mut squares = Vec::with_capacity(plan.max_squarings() as usize);
    square_all(r0, plan, |y| squares.push(y));

    // Back through the squarings: only the active prefix of each step carries new terms.
    for (k, y) in squares.into_iter().enumerate().rev() {
        let active = plan.active_at(k as u32);
        let g = grad.clone().slice([0..active, 0..n, 0..n]);
        let yt = y.transpose();
        let g_new = g.clone().matmul(yt.clone()) + yt.matmul(g);
        grad = if active == batch {
            g_new
        } else {
            grad.slice_assign([0..active, 0..n, 0..n], g_new)
        };
    }

    // Back through the solve and the scheme, group by group.
    let mut parts = Vec::with_capacity(plan.groups.len());
    for ((program, values), (&(_, start, end), r)) in group_values
        .iter()
        .zip(plan.groups.iter().zip(group_results))
    {
        let g = grad.clone().slice([start..end, 0..n, 0..n]);
        let xbar = if program.pade {
            let (u, v) = (
                values[program.outputs.0].clone(),
                values[program.outputs.1].clone(),
            );
            let q = v - u;
            let pbar = solve(q.transpose(), g);
            let qbar = -pbar.clone().matmul(r.transpose());
            let ubar = pbar.clone() - qbar.clone();
            let vbar = pbar + qbar;
            scheme::reverse(program, values, ubar, Some(vbar))
        } else {
            scheme::reverse(program, values, g, None)
        };
        parts.push(xbar);
    }
    let xbar = Tensor::cat(parts, 0);
    let xbar = if plan.max_squarings() == 0 {
        xbar
    } else {
        let scale = plan
            .squarings
            .iter()
            .map(|&s| (-(s as f64)).exp2())
            .collect();
        xbar * per_matrix(scale, &x)
    };
    poison(unsort_by(xbar, &plan.order), &plan.non_finite)
}
