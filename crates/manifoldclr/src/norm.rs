//! Batch norm over the devices of a data-parallel run (synchronised batch norm): in training,
//! the per-channel statistics of the global batch, each summed over the devices by a
//! [`StatsSum`] whose backward pass sums the gradients over them as well, so that every device's
//! inputs receive the gradient of every device's loss through the statistics.
//!
//! Without a [`StatsSum`], or outside training, [`batch_norm`] is the layer kernels' batch norm
//! (`vlgo_core::layers::batch_norm_module`): this device's own batch, or the running averages.

use burn::nn::BatchNorm;
use burn::nn::pool::MaxPool2d;
use burn::prelude::*;
use vlgo_core::layers::{
    LayerBackend, batch_norm_add_relu_module, batch_norm_module, batch_norm_relu_module,
    max_pool2d_module, update_running_stats,
};

use crate::error::{ClrError, Result};

/// A sum over the devices of a data-parallel run that autodiff differentiates (its backward
/// pass sums the upstream gradients over the devices): the exchange synchronised batch norm
/// needs. [`OwnStats`] is the one-device form.
pub trait StatsSum<B: Backend> {
    /// The number of devices summed over.
    fn devices(&self) -> usize;
    /// `x` summed over the devices, the same shape on every device.
    fn sum(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>>;
}

/// The sum over one device: the identity. With it [`batch_norm`] computes the synchronised
/// form's arithmetic on one device's whole batch, the reference that a run on several devices
/// equals to rounding.
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnStats;

impl<B: Backend> StatsSum<B> for OwnStats {
    fn devices(&self) -> usize {
        1
    }

    fn sum(&self, x: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        Ok(x)
    }
}

/// `bn` applied to `x` [N, C, ...]: in training (autodiff on) with `stats`, normalised by the
/// mean and biased variance of the inputs of every device (two exchanges: the mean, then the
/// squared deviations from it, which keeps the variance free of the cancellation of
/// `E[x^2] - E[x]^2`), the running averages updated with them as Burn updates its own; otherwise
/// [`batch_norm_module`]. Every device must pass the same shape; an `x` without a channel
/// dimension of `bn`'s size is an error.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::nn::BatchNormConfig;
/// use burn::prelude::*;
/// use manifoldclr::norm::{OwnStats, batch_norm};
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let bn = BatchNormConfig::new(2).init::<B>(&device);
/// let x = Tensor::<B, 2>::from_floats([[1.0, 10.0], [3.0, 30.0]], &device);
/// // One device: its own batch's statistics, as the layer kernels' batch norm.
/// let ours = batch_norm(&bn, x.clone(), Some(&OwnStats)).unwrap();
/// let kernel = vlgo_core::layers::batch_norm_module(&bn, x);
/// assert!(ours.sub(kernel).abs().max().into_scalar() < 1e-5);
/// ```
pub fn batch_norm<B: LayerBackend, const D: usize>(
    bn: &BatchNorm<B>,
    x: Tensor<B, D>,
    stats: Option<&dyn StatsSum<B>>,
) -> Result<Tensor<B, D>> {
    let dims = x.dims();
    check_channels(bn, &dims)?;
    let channels = dims[1];
    let stats = match stats {
        Some(s) if B::ad_enabled(&x.device()) => s,
        _ => return Ok(batch_norm_module(bn, x)),
    };
    // [C, rest]: one row per channel.
    let rest = dims.iter().product::<usize>() / channels;
    let rows = x.swap_dims(0, 1).reshape([channels, rest]);
    let count = (rest * stats.devices()) as f64;
    let mean = stats.sum(rows.clone().sum_dim(1))?.div_scalar(count);
    let centred = rows - mean.clone();
    let var = stats
        .sum(centred.clone().square().sum_dim(1))?
        .div_scalar(count);
    let scale = bn.gamma.val().reshape([channels, 1]) / var.clone().add_scalar(bn.epsilon).sqrt();
    let y = centred * scale + bn.beta.val().reshape([channels, 1]);
    update_running_stats(bn, mean.reshape([channels]), var.reshape([channels]));
    // Back to [N, C, ...].
    let mut moved = dims;
    moved.swap(0, 1);
    Ok(y.reshape(moved).swap_dims(0, 1))
}

/// An error unless `dims` is [batch, channels of `bn`, ...].
fn check_channels<B: Backend>(bn: &BatchNorm<B>, dims: &[usize]) -> Result<()> {
    let channels = bn.gamma.dims()[0];
    if dims.len() < 2 || dims[1] != channels {
        return Err(ClrError::invalid(
            "batch-norm input",
            format!("{dims:?}"),
            format!("[batch, {channels}, ...]"),
        ));
    }
    Ok(())
}

/// [`batch_norm`], ReLU, then `pool` when given: with `stats` in training, the synchronised
/// form followed by the two layers; otherwise the layer kernels' fused layer
/// (`vlgo_core::layers::batch_norm_relu_module`): in training this device's batch statistics
/// without the intermediate activations written out, in evaluation the running averages.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::nn::BatchNormConfig;
/// use burn::prelude::*;
/// use manifoldclr::norm::{OwnStats, batch_norm_relu};
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let bn = BatchNormConfig::new(2).init::<B>(&device);
/// let x = Tensor::<B, 4>::from_floats([[[[1.0]], [[10.0]]], [[[3.0]], [[30.0]]]], &device);
/// let synchronised = batch_norm_relu(&bn, x.clone(), Some(&OwnStats), None).unwrap();
/// let fused = batch_norm_relu(&bn, x, None, None).unwrap();
/// assert!(synchronised.sub(fused).abs().max().into_scalar() < 1e-5);
/// ```
pub fn batch_norm_relu<B: LayerBackend>(
    bn: &BatchNorm<B>,
    x: Tensor<B, 4>,
    stats: Option<&dyn StatsSum<B>>,
    pool: Option<&MaxPool2d>,
) -> Result<Tensor<B, 4>> {
    check_channels(bn, &x.dims())?;
    if stats.is_none() || !B::ad_enabled(&x.device()) {
        return Ok(batch_norm_relu_module(bn, x, pool));
    }
    let y = burn::tensor::activation::relu(batch_norm(bn, x, stats)?);
    Ok(match pool {
        Some(pool) => max_pool2d_module(pool, y),
        None => y,
    })
}

/// `relu(batch_norm(bn, x, stats) + residual)`, the second half of a ResNet block: with
/// `stats` in training, the synchronised form followed by the sum and the ReLU; otherwise the
/// layer kernels' fused layer (`vlgo_core::layers::batch_norm_add_relu_module`). `residual`
/// must have x's shape.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::nn::BatchNormConfig;
/// use burn::prelude::*;
/// use manifoldclr::norm::{OwnStats, batch_norm_add_relu};
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let bn = BatchNormConfig::new(2).init::<B>(&device);
/// let x = Tensor::<B, 4>::from_floats([[[[1.0]], [[10.0]]], [[[3.0]], [[30.0]]]], &device);
/// let r = Tensor::<B, 4>::from_floats([[[[0.5]], [[-2.0]]], [[[0.1]], [[0.3]]]], &device);
/// let synchronised = batch_norm_add_relu(&bn, x.clone(), r.clone(), Some(&OwnStats)).unwrap();
/// let fused = batch_norm_add_relu(&bn, x, r, None).unwrap();
/// assert!(synchronised.sub(fused).abs().max().into_scalar() < 1e-5);
/// ```
pub fn batch_norm_add_relu<B: LayerBackend>(
    bn: &BatchNorm<B>,
    x: Tensor<B, 4>,
    residual: Tensor<B, 4>,
    stats: Option<&dyn StatsSum<B>>,
) -> Result<Tensor<B, 4>> {
    check_channels(bn, &x.dims())?;
    if residual.dims() != x.dims() {
        return Err(ClrError::invalid(
            "residual",
            format!("{:?}", residual.dims()),
            format!("the batch-norm input's shape {:?}", x.dims()),
        ));
    }
    if stats.is_none() || !B::ad_enabled(&x.device()) {
        return Ok(batch_norm_add_relu_module(bn, x, residual));
    }
    Ok(burn::tensor::activation::relu(
        batch_norm(bn, x, stats)? + residual,
    ))
}

#[cfg(test)]
mod tests {
    use burn::nn::BatchNormConfig;
    use vlgo_core::testing::{TestAutodiffBackend as AB, TestBackend};

    use super::*;

    fn host<const D: usize>(t: Tensor<impl Backend, D>) -> Vec<f32> {
        t.into_data().convert::<f32>().into_vec().unwrap()
    }

    /// Values and gradients (to x, gamma, beta) of the one-device form against the layer
    /// kernels' batch norm, and the same running averages, on a [N, C, H, W] batch.
    #[test]
    fn the_one_device_form_is_the_kernels_batch_norm() {
        let device = Default::default();
        let x = Tensor::<AB, 4>::random([3, 4, 2, 5], burn::tensor::Distribution::Default, &device)
            .mul_scalar(3.0)
            .add_scalar(1.0);
        let w = Tensor::<AB, 4>::random([3, 4, 2, 5], burn::tensor::Distribution::Default, &device);
        let run = |ours: bool| {
            let bn = BatchNormConfig::new(4).init::<AB>(&device);
            let x = x.clone().require_grad();
            let y = match ours {
                true => batch_norm(&bn, x.clone(), Some(&OwnStats)).unwrap(),
                false => batch_norm_module(&bn, x.clone()),
            };
            let grads = (y.clone() * w.clone()).sum().backward();
            (
                host(y),
                host(x.grad(&grads).unwrap()),
                host(bn.gamma.grad(&grads).unwrap()),
                host(bn.running_mean.value_sync()),
                host(bn.running_var.value_sync()),
            )
        };
        let (ours, kernel) = (run(true), run(false));
        // The running averages moved (from mean 0, variance 1).
        assert!(kernel.3.iter().all(|m| m.abs() > 1e-3), "{:?}", kernel.3);
        let close = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() < 1e-4 * (1.0 + y.abs()))
        };
        assert!(close(&ours.0, &kernel.0), "values");
        assert!(close(&ours.1, &kernel.1), "gradient to x");
        assert!(close(&ours.2, &kernel.2), "gradient to gamma");
        assert!(close(&ours.3, &kernel.3), "running mean");
        assert!(close(&ours.4, &kernel.4), "running variance");
    }

    /// An input without `bn`'s channels is a named error, not a panic.
    #[test]
    fn inputs_without_the_channels_are_errors() {
        let device = Default::default();
        let bn = BatchNormConfig::new(3).init::<AB>(&device);
        let flat = Tensor::<AB, 1>::zeros([6], &device);
        let e = batch_norm(&bn, flat, Some(&OwnStats)).unwrap_err();
        assert!(e.to_string().contains("[batch, 3, ...]"), "{e}");
        let wrong = Tensor::<AB, 2>::zeros([2, 4], &device);
        assert!(batch_norm(&bn, wrong, None).is_err());
    }

    /// Outside training the running averages normalise, with or without a sum.
    #[test]
    fn inference_uses_the_running_averages() {
        let device = Default::default();
        let bn = BatchNormConfig::new(2).init::<TestBackend>(&device);
        let x = Tensor::<TestBackend, 2>::from_floats([[1.0, 10.0], [3.0, 30.0]], &device);
        let y = batch_norm(&bn, x.clone(), Some(&OwnStats)).unwrap();
        // Mean 0, variance 1: x / sqrt(1 + eps).
        assert!(
            host(y.sub(x.div_scalar((1.0f64 + 1e-5).sqrt())))
                .iter()
                .all(|v| v.abs() < 1e-6)
        );
    }
}
