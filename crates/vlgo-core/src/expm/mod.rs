//! The matrix exponential and the exponential-times-vector product, batched and differentiable
//! (`docs/expm.md`).
//!
//! * [`expm`] / [`try_expm`]: exp(A) for a batch [N, n, n]; Padé scaling and squaring by default,
//!   Bader-Blanes-Casas Taylor on request ([`ExpmMethod`]).
//! * [`expmv`] / [`try_expmv`]: exp(A) v without forming exp(A) (truncated Taylor with shift and
//!   early termination), the training hot path: T(c) z is all the objective needs.
//!
//! # Precision
//!
//! f32 inputs compute in f32 with the f32 degree tables (Padé 3, 5, 7). f16 and bf16 inputs are
//! storage formats only: they are promoted to f32, computed there and rounded once on output.
//! f64 inputs compute in f64 with degrees up to 13: that is the test oracle.
//!
//! # NaN and Inf
//!
//! A matrix holding NaN or ±Inf gives NaN (or Inf) in its own output and leaves the other matrices
//! of the batch untouched. Such a matrix is never scaled (`s = ceil(log2(inf))` is never a loop
//! bound), so the call always returns in bounded time; it never panics.
//!
//! # Gradients
//!
//! On [`Autodiff`](burn::backend::Autodiff) backends both functions have their own backward:
//! reverse mode through the polynomial scheme, the solve and the squarings for `expm`, the
//! checkpointed discrete adjoint of the Taylor loop for `expmv`. Both are linear in the upstream
//! gradient, so their relative accuracy does not depend on its scale.

mod autodiff;
mod backend;
mod config;
pub(crate) mod dense;
pub(crate) mod expmv;
pub(crate) mod plan;
mod routing;
pub(crate) mod scheme;
pub(crate) mod solve;

pub use config::{ExpmConfig, ExpmvConfig};
pub use expmv::{ExpmvCheckpoints, ExpmvPlan};
pub use routing::ExpmBackend;

use burn::prelude::*;
use burn::tensor::{DType, FloatDType, TensorPrimitive};
use serde::{Deserialize, Serialize};

use crate::error::{Result, VlgoError};

/// How the explicit exponential approximates exp(X) after scaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ExpmMethod {
    /// Padé [m/m] with m in {3, 5, 7} (f32) or {3, 5, 7, 9, 13} (f64), one linear solve.
    #[default]
    Pade,
    /// Bader-Blanes-Casas Taylor of degree up to 18 in 5 products, no solve.
    Taylor,
}

fn check_square(op: &'static str, dims: [usize; 3]) -> Result<()> {
    if dims[1] != dims[2] || dims[1] == 0 {
        return Err(VlgoError::Shape {
            op,
            expected: "square matrices [N, n, n] with n >= 1".into(),
            got: dims.to_vec(),
        });
    }
    Ok(())
}

/// The dtype the exponential computes in for an input dtype: halves promote to f32.
fn compute_dtype(op: &'static str, dtype: DType) -> Result<Option<FloatDType>> {
    match dtype {
        DType::F32 | DType::F64 => Ok(None),
        DType::F16 | DType::BF16 => Ok(Some(FloatDType::F32)),
        other => Err(VlgoError::UnsupportedDType {
            op,
            dtype: format!("{other:?}"),
        }),
    }
}

fn promote<B: Backend, const D: usize>(t: Tensor<B, D>, to: Option<FloatDType>) -> Tensor<B, D> {
    match to {
        Some(dtype) => t.cast(dtype),
        None => t,
    }
}

/// `t` in `dtype` (a no-op when it already is).
fn to_dtype<B: Backend, const D: usize>(t: Tensor<B, D>, dtype: DType) -> Tensor<B, D> {
    if t.dtype() == dtype { t } else { t.cast(dtype) }
}

/// exp(A) for a batch of square matrices [N, n, n], Padé scaling and squaring.
///
/// Panics on a non-square input, like Burn's own ops; [`try_expm`] returns an error instead.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// // A rotation generator: exp gives [[cos 1, -sin 1], [sin 1, cos 1]].
/// let a = Tensor::<NdArray, 3>::from_data([[[0.0, -1.0], [1.0, 0.0]]], &device);
/// let t = vlgo_core::expm(a).into_data().to_vec::<f32>().unwrap();
/// assert!((t[0] - 1f32.cos()).abs() < 1e-6 && (t[2] - 1f32.sin()).abs() < 1e-6);
/// ```
pub fn expm<B: ExpmBackend>(a: Tensor<B, 3>) -> Tensor<B, 3> {
    match try_expm(a) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

/// Fallible [`expm`]: an error for a non-square input or a non-float dtype.
pub fn try_expm<B: ExpmBackend>(a: Tensor<B, 3>) -> Result<Tensor<B, 3>> {
    expm_with(a, &ExpmConfig::default())
}

/// [`try_expm`] with options (method).
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use vlgo_core::{ExpmConfig, ExpmMethod};
///
/// let a = Tensor::<NdArray, 3>::from_data([[[0.5]]], &Default::default());
/// let t = vlgo_core::expm_with(a, &ExpmConfig::new().with_method(ExpmMethod::Taylor)).unwrap();
/// assert!((t.into_scalar() - 0.5f32.exp()).abs() < 1e-6);
/// ```
pub fn expm_with<B: ExpmBackend>(a: Tensor<B, 3>, config: &ExpmConfig) -> Result<Tensor<B, 3>> {
    check_square("expm", a.dims())?;
    let dtype = a.dtype();
    let promote_to = compute_dtype("expm", dtype)?;
    let a = promote(a, promote_to);
    let t = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(B::expm(
        a.into_primitive().tensor(),
        config.method,
    )));
    Ok(match promote_to {
        Some(_) => t.cast(dtype),
        None => t,
    })
}

/// exp(A) over the last two dimensions of a tensor of any rank >= 2, e.g. block-diagonal
/// generators [.., S, b, b].
pub fn try_expm_nd<B: ExpmBackend, const D: usize>(a: Tensor<B, D>) -> Result<Tensor<B, D>> {
    let dims = a.dims();
    if D < 2 {
        return Err(VlgoError::Shape {
            op: "expm",
            expected: "a tensor of rank >= 2 [.., n, n]".into(),
            got: dims.to_vec(),
        });
    }
    let (n, m) = (dims[D - 2], dims[D - 1]);
    let batch: usize = dims[..D - 2].iter().product();
    check_square("expm", [batch, n, m]).map_err(|_| VlgoError::Shape {
        op: "expm",
        expected: "square matrices [.., n, n] with n >= 1".into(),
        got: dims.to_vec(),
    })?;
    Ok(try_expm(a.reshape([batch, n, n]))?.reshape(dims))
}

/// y_i = exp(A_i) v_i for a batch, A [N, n, n] and v [N, n], without forming exp(A_i).
///
/// Panics on mismatched shapes; [`try_expmv`] returns an error instead.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// let a = Tensor::<NdArray, 3>::from_data([[[0.0, -1.0], [1.0, 0.0]]], &device);
/// let v = Tensor::<NdArray, 2>::from_data([[1.0, 0.0]], &device);
/// let y = vlgo_core::expmv(a, v).into_data().to_vec::<f32>().unwrap();
/// assert!((y[0] - 1f32.cos()).abs() < 1e-6 && (y[1] - 1f32.sin()).abs() < 1e-6);
/// ```
pub fn expmv<B: ExpmBackend>(a: Tensor<B, 3>, v: Tensor<B, 2>) -> Tensor<B, 2> {
    match try_expmv(a, v) {
        Ok(y) => y,
        Err(e) => panic!("{e}"),
    }
}

/// Fallible [`expmv`].
pub fn try_expmv<B: ExpmBackend>(a: Tensor<B, 3>, v: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
    expmv_with(a, v, &ExpmvConfig::default())
}

/// [`try_expmv`] with options.
pub fn expmv_with<B: ExpmBackend>(
    a: Tensor<B, 3>,
    v: Tensor<B, 2>,
    config: &ExpmvConfig,
) -> Result<Tensor<B, 2>> {
    config.validate()?;
    let dims = a.dims();
    check_square("expmv", dims)?;
    let vdims = v.dims();
    if vdims != [dims[0], dims[1]] {
        return Err(VlgoError::ShapeMismatch {
            op: "expmv",
            what: "v must be [N, n] for A [N, n, n]",
            lhs: dims.to_vec(),
            rhs: vdims.to_vec(),
        });
    }
    let dtype = a.dtype();
    let promote_to = compute_dtype("expmv", dtype)?;
    let a = promote(a, promote_to);
    let v = to_dtype(v, a.dtype());
    if dims[0] == 0 {
        return Ok(v);
    }
    let y = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(B::expmv(
        a.into_primitive().tensor(),
        v.into_primitive().tensor(),
        *config,
    )));
    Ok(to_dtype(y, dtype))
}

/// exp(A_p) v_p for generators given as coefficients over a dictionary: problem p = r S + k has
/// A_p = sum_m c[r, m] psi[m, k], with c [R, M], psi [M, S, n, n] and v [R S, n]. This is what
/// [`LieOperators::transport_with`](crate::LieOperators::transport_with) computes block by
/// block with [`TransportMethod::Generated`](crate::TransportMethod::Generated).
///
/// The value is [`expmv_with`] of the formed generators. When no input is tracked by autodiff
/// (best-of-J candidates, sampled augmentations), the GPU backends form each generator inside
/// their kernel, so the R S generators never exist in device memory; that kernel takes the
/// Taylor route for every finite generator (no explicit-exponential fallback) and skips zero
/// coefficients. The GPU kernel reads every used generator entry once per problem, where a
/// matmul reuses entries across the batch: lean in memory, slower for dense coefficients
/// (`docs/expm.md`). The CPU backends, for f32 dictionaries of at most 128 Ki floats per block
/// (M n^2, e.g. 32 generators of 64 x 64), form the generators of eight rows at a time in the
/// cache of the thread that solves them, tracked or not (with a gradient to take, one autodiff
/// node whose backward forms them again). Elsewhere the generators are formed with one matmul
/// (and, with a gradient to take, both ops are recorded). Half-precision inputs compute in f32
/// and return in c's dtype.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// // One generator (a rotation), one block, two problems at angles 1 and 0.5.
/// let psi = Tensor::<NdArray, 4>::from_data([[[[0.0, -1.0], [1.0, 0.0]]]], &device);
/// let c = Tensor::<NdArray, 2>::from_data([[1.0], [0.5]], &device);
/// let v = Tensor::<NdArray, 2>::from_data([[1.0, 0.0], [1.0, 0.0]], &device);
/// let y = vlgo_core::expmv_generated(c, psi, v, &Default::default()).unwrap();
/// let y = y.into_data().to_vec::<f32>().unwrap();
/// assert!((y[0] - 1f32.cos()).abs() < 1e-6 && (y[3] - 0.5f32.sin()).abs() < 1e-6);
/// ```
pub fn expmv_generated<B: ExpmBackend>(
    c: Tensor<B, 2>,
    psi: Tensor<B, 4>,
    v: Tensor<B, 2>,
    config: &ExpmvConfig,
) -> Result<Tensor<B, 2>> {
    config.validate()?;
    let [rows, m] = c.dims();
    let [pm, blocks, n, n2] = psi.dims();
    if n != n2 || n == 0 || pm != m {
        return Err(VlgoError::ShapeMismatch {
            op: "expmv_generated",
            what: "psi must be [M, S, n, n] with n >= 1 for coefficients c [R, M]",
            lhs: c.dims().to_vec(),
            rhs: psi.dims().to_vec(),
        });
    }
    if v.dims() != [rows * blocks, n] {
        return Err(VlgoError::Shape {
            op: "expmv_generated",
            expected: format!("v [R S, n] = [{}, {n}]", rows * blocks),
            got: v.dims().to_vec(),
        });
    }
    let dtype = c.dtype();
    let promote_to = compute_dtype("expmv_generated", dtype)?;
    let c = promote(c, promote_to);
    let (psi, v) = (to_dtype(psi, c.dtype()), to_dtype(v, c.dtype()));
    if rows == 0 || blocks == 0 {
        return Ok(to_dtype(v, dtype));
    }
    let y = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(B::expmv_generated(
        c.into_primitive().tensor(),
        psi.into_primitive().tensor(),
        v.into_primitive().tensor(),
        *config,
    )));
    Ok(to_dtype(y, dtype))
}

/// exp(A) v together with its pullback: the adjoints of A and v for any adjoint of the output,
/// through the same forward and backward an autodiff graph would run, without building one.
/// For inner loops that need many gradients of a few inputs (sparse inference).
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// let a = Tensor::<NdArray, 3>::zeros([2, 3, 3], &device);
/// let v = Tensor::<NdArray, 2>::ones([2, 3], &device);
/// let (y, pullback) = vlgo_core::expmv_pullback(a, v.clone(), &Default::default()).unwrap();
/// let (abar, vbar) = pullback.apply(y.clone()).unwrap();
/// assert_eq!(abar.dims(), [2, 3, 3]);
/// assert!((vbar - v).abs().max().into_scalar() < 1e-6); // exp(0)^T y = v
/// ```
pub fn expmv_pullback<B: ExpmBackend>(
    a: Tensor<B, 3>,
    v: Tensor<B, 2>,
    config: &ExpmvConfig,
) -> Result<(Tensor<B, 2>, ExpmvPullback<B>)> {
    config.validate()?;
    let dims = a.dims();
    check_square("expmv_pullback", dims)?;
    if v.dims() != [dims[0], dims[1]] {
        return Err(VlgoError::ShapeMismatch {
            op: "expmv_pullback",
            what: "v must be [N, n] for A [N, n, n]",
            lhs: dims.to_vec(),
            rhs: v.dims().to_vec(),
        });
    }
    let dtype = a.dtype();
    let promote_to = compute_dtype("expmv_pullback", dtype)?;
    let a = promote(a, promote_to);
    let v = to_dtype(v, a.dtype());
    if dims[0] == 0 {
        let y = to_dtype(v.clone(), dtype);
        let saved = None;
        return Ok((y, ExpmvPullback { a, v, saved, dtype }));
    }
    let (y, saved) = B::expmv_checkpointed(
        a.clone().into_primitive().tensor(),
        v.clone().into_primitive().tensor(),
        *config,
    );
    let y = to_dtype(y, dtype);
    let saved = Some(saved);
    Ok((y, ExpmvPullback { a, v, saved, dtype }))
}

/// The pullback of one [`expmv_pullback`] call.
pub struct ExpmvPullback<B: ExpmBackend> {
    a: Tensor<B, 3>,
    v: Tensor<B, 2>,
    /// None for an empty batch.
    saved: Option<ExpmvCheckpoints<B>>,
    dtype: DType,
}

impl<B: ExpmBackend> ExpmvPullback<B> {
    /// (abar [N, n, n], vbar [N, n]) for the output adjoint `grad` [N, n].
    pub fn apply(&self, grad: Tensor<B, 2>) -> Result<(Tensor<B, 3>, Tensor<B, 2>)> {
        if grad.dims() != self.v.dims() {
            return Err(VlgoError::ShapeMismatch {
                op: "ExpmvPullback::apply",
                what: "the output adjoint must have the output's shape [N, n]",
                lhs: self.v.dims().to_vec(),
                rhs: grad.dims().to_vec(),
            });
        }
        let Some(saved) = &self.saved else {
            return Ok((self.a.clone(), self.v.clone()));
        };
        let grad = to_dtype(grad, self.a.dtype());
        let (abar, vbar) = B::expmv_backward(
            self.a.clone().into_primitive().tensor(),
            self.v.clone().into_primitive().tensor(),
            grad.into_primitive().tensor(),
            saved,
        );
        let abar = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(abar));
        let vbar = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(vbar));
        Ok((to_dtype(abar, self.dtype), to_dtype(vbar, self.dtype)))
    }
}

/// The portable implementation from Burn tensor ops, which every backend without a kernel runs.
/// Public for comparisons and benchmarks against the kernels; inputs must be valid (square, f32
/// or f64), as [`ExpmBackend`] receives them.
pub mod tensor_ops {
    use burn::prelude::*;

    use super::{ExpmMethod, ExpmvConfig, dense, expmv as taylor};

    /// exp(A) for a batch [N, n, n].
    pub fn expm<B: Backend>(a: Tensor<B, 3>, method: ExpmMethod) -> Tensor<B, 3> {
        dense::expm_forward(a, method)
    }

    /// The adjoint of A given the adjoint of exp(A).
    pub fn expm_backward<B: Backend>(
        a: Tensor<B, 3>,
        grad: Tensor<B, 3>,
        method: ExpmMethod,
    ) -> Tensor<B, 3> {
        let plan = dense::plan(&a, method);
        dense::expm_backward(a, grad, &plan)
    }

    /// exp(A) v and the adjoints (Abar, vbar) for the output adjoint `grad`.
    pub fn expmv_with_backward<B: Backend>(
        a: Tensor<B, 3>,
        v: Tensor<B, 2>,
        grad: Tensor<B, 2>,
        config: &ExpmvConfig,
    ) -> (Tensor<B, 2>, Tensor<B, 3>, Tensor<B, 2>) {
        let (y, saved) = taylor::expmv_forward(a.clone(), v.clone(), config);
        let (abar, vbar) = taylor::expmv_backward(a, v, grad, &saved);
        (y, abar, vbar)
    }
}

/// Floating-point operations of the forward exponential for a batch under the chosen degrees and
/// scalings: 2n^3 per matrix product (scheme and squarings) and 8n^3/3 per Padé solve (LU with
/// n right-hand sides). For throughput figures in benchmarks.
pub fn forward_flops<B: Backend>(a: &Tensor<B, 3>, method: ExpmMethod) -> f64 {
    let n = a.dims()[1] as f64;
    let plan = dense::plan(a, method);
    let mut flops = 0.0;
    for &(degree, start, end) in &plan.groups {
        let program = match method {
            ExpmMethod::Pade => scheme::pade(degree),
            ExpmMethod::Taylor => scheme::taylor(degree),
        };
        let products = program
            .steps
            .iter()
            .filter(|s| matches!(s, scheme::Step::MatMul(..)))
            .count() as f64;
        let solve = if program.pade { 8.0 / 3.0 } else { 0.0 };
        flops += (end - start) as f64 * (2.0 * products + solve) * n * n * n;
    }
    flops + plan.squarings.iter().map(|&s| s as f64).sum::<f64>() * 2.0 * n * n * n
}
