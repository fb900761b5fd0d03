//! The manifold objective and its diagnostics.

use burn::prelude::*;

use crate::error::{Result, check_same_shape};

/// Both feature batches of a loss must be the same [N, d].
fn check_pair<B: Backend>(op: &'static str, a: &Tensor<B, 2>, b: &Tensor<B, 2>) -> Result<()> {
    check_same_shape(
        op,
        "both feature batches must be [N, d]",
        &a.dims(),
        &b.dims(),
    )
}

/// L_m = mean over batch and features of (z_hat - sg(z1))^2, z_hat = T(c) z0.
///
/// The target is detached (stop-gradient); z_hat is not, so the loss also trains whatever produced
/// z0. The mean over features follows the public code (the paper's sum is a factor d larger).
///
/// Panics when the two batches differ in shape; [`try_manifold_loss`] returns an error.
pub fn manifold_loss<B: Backend>(z_hat: Tensor<B, 2>, z1: Tensor<B, 2>) -> Tensor<B, 1> {
    try_manifold_loss(z_hat, z1).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`manifold_loss`].
pub fn try_manifold_loss<B: Backend>(
    z_hat: Tensor<B, 2>,
    z1: Tensor<B, 2>,
) -> Result<Tensor<B, 1>> {
    check_pair("manifold_loss", &z_hat, &z1)?;
    Ok((z_hat - z1.detach()).square().mean())
}

/// Distance improvement DI = mean_n ||z1 - z_hat||^2 / (||z1 - z0||^2 + 1e-6), a diagnostic
/// (no gradient). DI < 1 means the operators move z0 toward z1; a falling loss with DI >= 1
/// means collapse, not learning.
///
/// Panics when the three batches differ in shape; [`try_distance_improvement`] returns an
/// error.
pub fn distance_improvement<B: Backend>(
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    z_hat: Tensor<B, 2>,
) -> f64 {
    try_distance_improvement(z0, z1, z_hat).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`distance_improvement`].
pub fn try_distance_improvement<B: Backend>(
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    z_hat: Tensor<B, 2>,
) -> Result<f64> {
    Ok(try_distance_improvement_tensor(z0, z1, z_hat)?
        .into_scalar()
        .to_f64())
}

/// [`distance_improvement`] left on the device, shape `[1]`: a training step reads it back
/// together with its loss, in one transfer.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use vlgo_core::distance_improvement_tensor;
///
/// let device = Default::default();
/// let z0 = Tensor::<NdArray, 2>::from_floats([[0.0, 0.0]], &device);
/// let z1 = Tensor::<NdArray, 2>::from_floats([[2.0, 0.0]], &device);
/// let halfway = Tensor::<NdArray, 2>::from_floats([[1.0, 0.0]], &device);
/// let di = distance_improvement_tensor(z0, z1, halfway);
/// assert!((di.into_scalar() - 0.25).abs() < 1e-6);
/// ```
///
/// Panics when the three batches differ in shape; [`try_distance_improvement_tensor`] returns
/// an error.
pub fn distance_improvement_tensor<B: Backend>(
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    z_hat: Tensor<B, 2>,
) -> Tensor<B, 1> {
    try_distance_improvement_tensor(z0, z1, z_hat).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`distance_improvement_tensor`].
pub fn try_distance_improvement_tensor<B: Backend>(
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    z_hat: Tensor<B, 2>,
) -> Result<Tensor<B, 1>> {
    check_pair("distance_improvement", &z0, &z1)?;
    check_pair("distance_improvement", &z_hat, &z1)?;
    let after = (z1.clone() - z_hat).detach().square().sum_dim(1);
    let before = (z1 - z0).detach().square().sum_dim(1) + 1e-6;
    Ok((after / before).mean())
}
