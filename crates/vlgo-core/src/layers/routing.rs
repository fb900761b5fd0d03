//! [`LayerBackend`], implemented for every Burn backend: the CPU kernels where `B` is a shipped
//! backend, Burn's own operations otherwise (see [`crate::shipped`]).

use core::any::{Any, TypeId};

use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::ops::{ConvOptions, FloatTensor};

use super::AdamWStep;
#[allow(unused_imports)]
use super::backend::{LayerKernels, PoolGeometry, tensor_ops};
// Built without a kernel feature, the dispatchers reach no kernel and take no argument.
#[allow(unused_imports)]
use crate::shipped::{dispatch_shipped, route, take};

/// Backends that run the layers of [`crate::layers`]: convolution, batch norm, max pooling,
/// batched fully connected layers and the fused AdamW step. Every Burn backend.
///
/// Implemented for every `B: Backend`. Where `B` is a shipped backend, the layers run this
/// crate's kernels: on `Flex` and `NdArray` the CPU kernels, and under `Autodiff` over any
/// shipped backend (the GPU ones too) one autodiff node per layer with its own backward, which
/// corrects Burn 0.21's zero adjoint of a convolution whose kernel is smaller than its stride. On
/// every other backend they are Burn's own operations, differentiated by Burn's autodiff. Call
/// the functions of [`crate::layers`] rather than these methods.
pub trait LayerBackend: Backend {
    /// The convolution of x [N, C_in, H, W] with weight [C_out, C_in / groups, kh, kw].
    fn convolve(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self>;

    /// Training-mode batch norm of x [N, C, S] with the batch's statistics: the output, the
    /// per-channel mean and the biased variance (both `[C]`).
    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3];

    /// Training-mode batch norm of x [N, C, H, W] with the batch's statistics, then ReLU, then
    /// a max pooling (kernel size, stride, symmetric padding; dilation 1, floor mode) when
    /// `pool` is given: the output, the per-channel mean and the biased variance (both `[C]`).
    fn batch_norm_relu_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        pool: Option<[[usize; 2]; 3]>,
    ) -> [FloatTensor<Self>; 3];

    /// relu(batch norm of x + residual) in training mode with the batch's statistics, x and
    /// the residual [N, C, H, W]: the output, the per-channel mean and the biased variance.
    fn batch_norm_add_relu_train(
        x: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3];

    /// act(x w + b) for S batched layers, x [S, N, K], w [S, K, M] and b [S, 1, M], as
    /// [S, N, M]; act is LeakyReLU with `negative_slope` when given, the identity otherwise.
    fn batched_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        negative_slope: Option<f64>,
    ) -> FloatTensor<Self>;

    /// One AdamW step on a parameter from its gradient and moments: the new parameter, first
    /// and second moment (see [`FusedAdamW`](super::FusedAdamW)).
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moment_1: FloatTensor<Self>,
        moment_2: FloatTensor<Self>,
        step: AdamWStep,
    ) -> [FloatTensor<Self>; 3];

    /// The mean over the spatial dimensions of x [N, C, H, W], as [N, C, 1, 1]: Burn's
    /// adaptive average pool on the shipped backends, a mean of the reshaped rows elsewhere
    /// (not every backend has the pool: Candle's panics).
    fn global_avg_pool(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `y = scale[c] x + shift[c]` for x `[N, C, S]`: batch norm in evaluation mode.
    fn channel_affine(
        x: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        shift: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// Max pooling of x [N, C, H, W] with kernel size, stride and symmetric padding (each
    /// [height, width]), dilation 1 and floor mode.
    fn max_pool(
        x: FloatTensor<Self>,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> FloatTensor<Self>;
}

impl<B: Backend> LayerBackend for B {
    fn convolve(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        options: ConvOptions<2>,
    ) -> FloatTensor<B> {
        route::<B, _, _>(
            dispatch::convolve,
            (x, weight, options),
            |(x, weight, options)| B::conv2d(x, weight, None, options),
        )
    }

    fn batch_norm_train(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
    ) -> [FloatTensor<B>; 3] {
        route::<B, _, _>(
            dispatch::batch_norm_train,
            (x, gamma, beta, epsilon),
            |(x, gamma, beta, epsilon)| tensor_ops::batch_norm_train::<B>(x, gamma, beta, epsilon),
        )
    }

    fn batch_norm_relu_train(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
        pool: Option<PoolGeometry>,
    ) -> [FloatTensor<B>; 3] {
        route::<B, _, _>(
            dispatch::batch_norm_relu_train,
            (x, gamma, beta, epsilon, pool),
            |(x, gamma, beta, epsilon, pool)| {
                tensor_ops::batch_norm_relu_train::<B>(x, gamma, beta, epsilon, pool)
            },
        )
    }

    fn batch_norm_add_relu_train(
        x: FloatTensor<B>,
        residual: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
    ) -> [FloatTensor<B>; 3] {
        route::<B, _, _>(
            dispatch::batch_norm_add_relu_train,
            (x, residual, gamma, beta, epsilon),
            |(x, r, gamma, beta, epsilon)| {
                tensor_ops::batch_norm_add_relu_train::<B>(x, r, gamma, beta, epsilon)
            },
        )
    }

    fn batched_linear(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        bias: FloatTensor<B>,
        negative_slope: Option<f64>,
    ) -> FloatTensor<B> {
        route::<B, _, _>(
            dispatch::batched_linear,
            (x, weight, bias, negative_slope),
            |(x, weight, bias, slope)| tensor_ops::batched_linear::<B>(x, weight, bias, slope),
        )
    }

    fn adamw_step(
        param: FloatTensor<B>,
        grad: FloatTensor<B>,
        moment_1: FloatTensor<B>,
        moment_2: FloatTensor<B>,
        step: AdamWStep,
    ) -> [FloatTensor<B>; 3] {
        route::<B, _, _>(
            dispatch::adamw_step,
            (param, grad, moment_1, moment_2, step),
            |(p, g, m1, m2, step)| tensor_ops::adamw_step::<B>(p, g, m1, m2, step),
        )
    }

    fn global_avg_pool(x: FloatTensor<B>) -> FloatTensor<B> {
        route::<B, _, _>(dispatch::global_avg_pool, (x,), |(x,)| {
            let x: Tensor<B, 4> = Tensor::from_primitive(TensorPrimitive::Float(x));
            let [n, c, h, w] = x.dims();
            x.reshape([n, c, h * w])
                .mean_dim(2)
                .reshape([n, c, 1, 1])
                .into_primitive()
                .tensor()
        })
    }

    fn channel_affine(
        x: FloatTensor<B>,
        scale: FloatTensor<B>,
        shift: FloatTensor<B>,
    ) -> FloatTensor<B> {
        route::<B, _, _>(
            dispatch::channel_affine,
            (x, scale, shift),
            |(x, scale, shift)| tensor_ops::channel_affine::<B>(x, scale, shift),
        )
    }

    fn max_pool(
        x: FloatTensor<B>,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> FloatTensor<B> {
        let pool: PoolGeometry = [kernel, stride, padding];
        route::<B, _, _>(dispatch::max_pool, (x, pool), |(x, pool)| {
            let [kernel, stride, padding] = pool;
            B::max_pool2d(x, kernel, stride, padding, [1, 1], false)
        })
    }
}

/// The dispatchers of the methods above: each runs the shipped backend's [`LayerKernels`]
/// method.
// Built without a kernel feature, the dispatchers decline everything and read nothing.
#[allow(unused_variables)]
mod dispatch {
    use super::*;

    type Ternary<K, T> = (FloatTensor<K>, FloatTensor<K>, FloatTensor<K>, T);

    pub fn convolve(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (x, w, options) = take::<(FloatTensor<K>, FloatTensor<K>, ConvOptions<2>)>(args);
            <K as LayerKernels>::convolve(x, w, options)
        });
        None
    }

    pub fn batch_norm_train(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (x, gamma, beta, epsilon) = take::<Ternary<K, f64>>(args);
            <K as LayerKernels>::batch_norm_train(x, gamma, beta, epsilon)
        });
        None
    }

    pub fn batch_norm_relu_train(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        type Args<K> = (
            FloatTensor<K>,
            FloatTensor<K>,
            FloatTensor<K>,
            f64,
            Option<PoolGeometry>,
        );
        dispatch_shipped!(id, K => {
            let (x, gamma, beta, epsilon, pool) = take::<Args<K>>(args);
            <K as LayerKernels>::batch_norm_relu_train(x, gamma, beta, epsilon, pool)
        });
        None
    }

    pub fn batch_norm_add_relu_train(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        type Args<K> = (
            FloatTensor<K>,
            FloatTensor<K>,
            FloatTensor<K>,
            FloatTensor<K>,
            f64,
        );
        dispatch_shipped!(id, K => {
            let (x, r, gamma, beta, epsilon) = take::<Args<K>>(args);
            <K as LayerKernels>::batch_norm_add_relu_train(x, r, gamma, beta, epsilon)
        });
        None
    }

    pub fn batched_linear(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (x, w, b, slope) = take::<Ternary<K, Option<f64>>>(args);
            <K as LayerKernels>::batched_linear(x, w, b, slope)
        });
        None
    }

    pub fn adamw_step(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        type Args<K> = (
            FloatTensor<K>,
            FloatTensor<K>,
            FloatTensor<K>,
            FloatTensor<K>,
            AdamWStep,
        );
        dispatch_shipped!(id, K => {
            let (p, g, m1, m2, step) = take::<Args<K>>(args);
            <K as LayerKernels>::adamw_step(p, g, m1, m2, step)
        });
        None
    }

    pub fn global_avg_pool(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (x,) = take::<(FloatTensor<K>,)>(args);
            <K as LayerKernels>::global_avg_pool(x)
        });
        None
    }

    pub fn max_pool(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (x, pool) = take::<(FloatTensor<K>, PoolGeometry)>(args);
            <K as LayerKernels>::max_pool(x, pool)
        });
        None
    }

    pub fn channel_affine(id: TypeId, args: &mut dyn Any) -> Option<Box<dyn Any>> {
        dispatch_shipped!(id, K => {
            let (x, scale, shift) = take::<(FloatTensor<K>, FloatTensor<K>, FloatTensor<K>)>(args);
            <K as LayerKernels>::channel_affine(x, scale, shift)
        });
        None
    }
}
