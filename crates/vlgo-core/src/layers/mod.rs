//! Layers with fast CPU forwards and backwards, for networks trained on the CPU backends (the
//! ResNet-18 backbone of the contrastive methods, the semi-supervised classifier):
//! two-dimensional convolution, batch norm, max pooling and batched fully connected layers.
//!
//! [`conv2d`] computes what `burn::tensor::module::conv2d` computes, [`batch_norm_module`] what
//! `burn::nn::BatchNorm::forward` computes, [`max_pool2d_module`] what
//! `burn::nn::pool::MaxPool2d::forward` computes. On `Flex` and `NdArray` in f32 they run the
//! kernels of `cpu::conv` (im2col and one product per group of images, forward and in both
//! adjoints; one group only), `cpu::batch_norm` (per-channel sums and one multiply-add per
//! entry) and `cpu::pool`, each a single autodiff node; everywhere else, and for other dtypes,
//! they are Burn's own operations. [`conv2d_module`], [`batch_norm_module`] and
//! [`max_pool2d_module`] apply `burn::nn` modules, so models keep Burn's modules,
//! initialisation and records. [`batch_norm_relu_module`] is batch norm, ReLU and (optionally)
//! max pooling as one layer, which on the CPU kernels writes neither intermediate activation
//! and recomputes them in its backward; [`batch_norm_add_relu_module`] does the same for the
//! second half of a ResNet block (batch norm, the residual sum, ReLU). [`batched_linear`] runs
//! S fully connected layers (with or without LeakyReLU) as one node, and [`FusedAdamW`] takes
//! Burn's AdamW step in one pass per parameter (`cpu::dense`, `cpu::adamw` on the CPU backends).

mod autodiff;
mod backend;
mod optim;
mod routing;
pub mod timing;

pub use optim::{AdamWStep, FusedAdamW, FusedAdamWConfig, FusedAdamWState};
pub use routing::LayerBackend;

use burn::nn::conv::Conv2d;
use burn::nn::pool::MaxPool2d;
use burn::nn::{BatchNorm, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::ops::{ConvOptions, FloatTensor};

/// The mean of `x` [N, C, H, W] over its spatial dimensions, as [N, C]: the global average pool
/// that ends a ResNet (`AdaptiveAvgPool2d([1, 1])` and a flatten), on every backend.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let x = Tensor::<NdArray, 4>::from_data([[[[1.0, 2.0], [3.0, 6.0]]]], &Default::default());
/// let y = vlgo_core::layers::global_avg_pool(x);
/// assert_eq!(y.into_data().to_vec::<f32>().unwrap(), vec![3.0]);
/// ```
pub fn global_avg_pool<B: LayerBackend>(x: Tensor<B, 4>) -> Tensor<B, 2> {
    let [n, c, _, _] = x.dims();
    let y: Tensor<B, 4> = wrap(B::global_avg_pool(unwrap(x)));
    y.reshape([n, c])
}

/// The convolution of `x` [N, C_in, H, W] with `weight` [C_out, C_in / groups, kh, kw], plus
/// `bias` `[C_out]`; differentiable on `Autodiff`.
///
/// Shapes and options are checked as Burn checks them (a mismatch panics, as it does in
/// `burn::tensor::module::conv2d`); [`try_conv2d`] returns an error instead, and
/// [`conv2d_module`] is the way to call it on a module.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use burn::tensor::ops::{ConvOptions, FloatTensor};
///
/// let device = Default::default();
/// let x = Tensor::<NdArray, 4>::ones([2, 1, 4, 4], &device);
/// let w = Tensor::<NdArray, 4>::ones([3, 1, 3, 3], &device);
/// let y = vlgo_core::layers::conv2d(x, w, None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
/// assert_eq!(y.dims(), [2, 3, 4, 4]);
/// // A corner sees 4 of the 9 kernel taps, the middle all 9.
/// let y = y.into_data().to_vec::<f32>().unwrap();
/// assert_eq!((y[0], y[5]), (4.0, 9.0));
/// ```
pub fn conv2d<B: LayerBackend>(
    x: Tensor<B, 4>,
    weight: Tensor<B, 4>,
    bias: Option<Tensor<B, 1>>,
    options: ConvOptions<2>,
) -> Tensor<B, 4> {
    let out: Tensor<B, 4> = wrap(B::convolve(unwrap(x), unwrap(weight), options));
    match bias {
        // Added outside the op so that autodiff differentiates it as any broadcast sum.
        Some(bias) => {
            let channels = bias.dims()[0];
            out + bias.reshape([1, channels, 1, 1])
        }
        None => out,
    }
}

/// Fallible [`conv2d`]: an error, not a panic, for shapes or options that do not fit: the
/// weight's input channels times `groups` against x's channels, groups dividing the output
/// channels, a bias of one value per output channel, non-zero strides and dilations, and a
/// (dilated) kernel no larger than the padded input.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use burn::tensor::ops::ConvOptions;
///
/// let device = Default::default();
/// let x = Tensor::<NdArray, 4>::ones([2, 3, 4, 4], &device);
/// let w = Tensor::<NdArray, 4>::ones([5, 2, 3, 3], &device); // 2 input channels, not 3
/// let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
/// let e = vlgo_core::layers::try_conv2d(x, w, None, options).unwrap_err();
/// assert!(e.to_string().contains("conv2d"), "{e}");
/// ```
pub fn try_conv2d<B: LayerBackend>(
    x: Tensor<B, 4>,
    weight: Tensor<B, 4>,
    bias: Option<Tensor<B, 1>>,
    options: ConvOptions<2>,
) -> crate::Result<Tensor<B, 4>> {
    let ([_, c_in, h, w], [c_out, c_group, kh, kw]) = (x.dims(), weight.dims());
    let groups = options.groups;
    let mut problems = Vec::new();
    if groups == 0 || c_group * groups != c_in || c_out % groups != 0 {
        problems.push(format!(
            "the weight [C_out, C_in / groups, kh, kw] = {:?} with {groups} groups for {c_in} input channels",
            weight.dims()
        ));
    }
    if let Some(bias) = &bias
        && bias.dims() != [c_out]
    {
        problems.push(format!("a bias of {c_out} values, not {:?}", bias.dims()));
    }
    if options.stride.contains(&0) || options.dilation.contains(&0) {
        problems.push("non-zero strides and dilations".to_string());
    }
    for (size, (k, (pad, dil))) in [h, w].into_iter().zip(
        [kh, kw]
            .into_iter()
            .zip(options.padding.into_iter().zip(options.dilation)),
    ) {
        if dil * k.saturating_sub(1) + 1 > size + 2 * pad {
            problems.push(format!(
                "a dilated kernel of {} within the padded input of {}",
                dil * k.saturating_sub(1) + 1,
                size + 2 * pad
            ));
        }
    }
    if !problems.is_empty() {
        return Err(crate::VlgoError::Shape {
            op: "conv2d",
            expected: problems.join("; "),
            got: x.dims().to_vec(),
        });
    }
    Ok(conv2d(x, weight, bias, options))
}

/// `conv.forward(x)` through [`conv2d`]. `Valid` and symmetric `Explicit` padding take the fast
/// path; `Same` and uneven `Explicit` padding keep the module's own forward.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::nn::conv::Conv2dConfig;
/// use burn::nn::{BatchNorm, PaddingConfig2d};
/// use burn::prelude::*;
///
/// let device = Default::default();
/// let conv = Conv2dConfig::new([1, 4], [3, 3])
///     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
///     .init::<NdArray>(&device);
/// let x = Tensor::<NdArray, 4>::ones([2, 1, 8, 8], &device);
/// let ours = vlgo_core::layers::conv2d_module(&conv, x.clone());
/// let burns = conv.forward(x);
/// assert!(ours.sub(burns).abs().max().into_scalar() < 1e-5);
/// ```
pub fn conv2d_module<B: LayerBackend>(conv: &Conv2d<B>, x: Tensor<B, 4>) -> Tensor<B, 4> {
    match symmetric_padding(&conv.padding) {
        Some(padding) => conv2d(
            x,
            conv.weight.val(),
            conv.bias.as_ref().map(|b| b.val()),
            ConvOptions::new(conv.stride, padding, conv.dilation, conv.groups),
        ),
        None => conv.forward(x),
    }
}

/// [height, width] padding of `Valid` and symmetric `Explicit` settings, the ones the kernels
/// take; `None` for the others (`Same` depends on the input's size).
fn symmetric_padding(padding: &PaddingConfig2d) -> Option<[usize; 2]> {
    match *padding {
        PaddingConfig2d::Valid => Some([0, 0]),
        PaddingConfig2d::Explicit(top, left, bottom, right) => {
            (top == bottom && left == right).then_some([top, left])
        }
        PaddingConfig2d::Same => None,
    }
}

/// `pool.forward(x)`, on the shipped CPU backends through this crate's kernel (one autodiff
/// node whose backward finds each window's largest entry again). Dilation 1 in floor mode with
/// `Valid` or symmetric `Explicit` padding takes that path; every other setting keeps the
/// module's own forward. Ties go to the first largest entry in row-major order, as in Burn's
/// `Flex` pooling.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::nn::PaddingConfig2d;
/// use burn::nn::pool::MaxPool2dConfig;
/// use burn::prelude::*;
///
/// let pool = MaxPool2dConfig::new([3, 3])
///     .with_strides([2, 2])
///     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
///     .init();
/// let x = Tensor::<NdArray, 1>::from_floats([1.0, 5.0, 2.0, 0.0, 3.0, 4.0, 7.0, 6.0, 8.0], &Default::default())
///     .reshape([1, 1, 3, 3]);
/// let y = vlgo_core::layers::max_pool2d_module(&pool, x.clone());
/// assert_eq!(y.clone().into_data().to_vec::<f32>().unwrap(), vec![5.0, 5.0, 7.0, 8.0]);
/// assert!(y.sub(pool.forward(x)).abs().max().into_scalar() == 0.0);
/// ```
pub fn max_pool2d_module<B: LayerBackend>(pool: &MaxPool2d, x: Tensor<B, 4>) -> Tensor<B, 4> {
    match kernel_pool(pool) {
        Some([kernel, stride, padding]) => wrap(B::max_pool(unwrap(x), kernel, stride, padding)),
        None => pool.forward(x),
    }
}

/// The kernel size, stride and padding of a pooling the kernels take: dilation 1 in floor mode
/// with `Valid` or symmetric `Explicit` padding.
fn kernel_pool(pool: &MaxPool2d) -> Option<[[usize; 2]; 3]> {
    let padding = symmetric_padding(&pool.padding)?;
    (pool.dilation == [1, 1] && !pool.ceil_mode).then_some([pool.kernel_size, pool.stride, padding])
}

/// `relu(bn.forward(x))`, then `pool` when given, as one layer: what a ResNet's stem and the
/// first half of each block compute. In training (autodiff on) it is one autodiff node whose
/// forward writes neither the normalised nor the rectified activation (on the shipped CPU
/// backends: the batch's statistics, then one pass that normalises, rectifies and pools) and
/// whose backward recomputes them from `x`; the running averages are updated as
/// [`batch_norm_module`] updates them. Values and gradients are those of the three layers
/// ([`batch_norm_module`], ReLU, [`max_pool2d_module`]) applied in turn; a pooling the kernels
/// do not take (see [`max_pool2d_module`]) is applied after the fused layer by its own
/// forward.
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::nn::BatchNormConfig;
/// use burn::nn::pool::MaxPool2dConfig;
/// use burn::prelude::*;
/// use burn::tensor::Distribution;
/// use vlgo_core::layers::{batch_norm_module, batch_norm_relu_module, max_pool2d_module};
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let bn = BatchNormConfig::new(3).init::<B>(&device);
/// let pool = MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
/// let x = Tensor::<B, 4>::random([2, 3, 4, 4], Distribution::Default, &device);
/// let fused = batch_norm_relu_module(&bn, x.clone(), Some(&pool));
/// let apart = max_pool2d_module(&pool, burn::tensor::activation::relu(batch_norm_module(&bn, x)));
/// assert_eq!(fused.dims(), [2, 3, 2, 2]);
/// assert!(fused.sub(apart).abs().max().into_scalar() < 1e-6);
/// ```
pub fn batch_norm_relu_module<B: LayerBackend>(
    bn: &BatchNorm<B>,
    x: Tensor<B, 4>,
    pool: Option<&MaxPool2d>,
) -> Tensor<B, 4> {
    if !B::ad_enabled(&x.device()) {
        let y = burn::tensor::activation::relu(batch_norm_module(bn, x));
        return match pool {
            Some(pool) => max_pool2d_module(pool, y),
            None => y,
        };
    }
    let geometry = pool.and_then(kernel_pool);
    let [y, mean, var] = B::batch_norm_relu_train(
        unwrap(x),
        unwrap(bn.gamma.val()),
        unwrap(bn.beta.val()),
        bn.epsilon,
        geometry,
    );
    update_running_stats(bn, wrap(mean), wrap(var));
    let y = wrap(y);
    match pool {
        Some(pool) if geometry.is_none() => pool.forward(y),
        _ => y,
    }
}

/// Training-mode batch norm of `x` [N, C, ...] with the batch's statistics: the output, and the
/// per-channel mean and biased variance (both `[C]`, outside the autodiff graph).
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// let x = Tensor::<NdArray, 1>::from_floats([1.0, 3.0, 10.0, 30.0], &device).reshape([2, 2, 1]);
/// let (gamma, beta) = (Tensor::ones([2], &device), Tensor::zeros([2], &device));
/// let (y, mean, var) = vlgo_core::layers::batch_norm_train(x, gamma, beta, 0.0);
/// assert_eq!(mean.into_data().to_vec::<f32>().unwrap(), vec![5.5, 16.5]);
/// assert_eq!(var.into_data().to_vec::<f32>().unwrap(), vec![20.25, 182.25]);
/// let y = y.into_data().to_vec::<f32>().unwrap();
/// assert!((y[0] + 1.0).abs() < 1e-6 && (y[3] - 1.0).abs() < 1e-6);
/// ```
pub fn batch_norm_train<B: LayerBackend, const D: usize>(
    x: Tensor<B, D>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
    epsilon: f64,
) -> (Tensor<B, D>, Tensor<B, 1>, Tensor<B, 1>) {
    let dims = x.dims();
    let [y, mean, var] =
        B::batch_norm_train(unwrap(as_channels(x)), unwrap(gamma), unwrap(beta), epsilon);
    (wrap::<B, 3>(y).reshape(dims), wrap(mean), wrap(var))
}

/// `bn.forward(x)` through the layer kernels: with autodiff, the batch's statistics (and the
/// module's running averages updated as Burn updates them: momentum, biased variance); without,
/// the running averages as one per-channel multiply-add.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::nn::BatchNormConfig;
/// use burn::prelude::*;
/// use burn::tensor::Distribution;
///
/// let device = Default::default();
/// let bn = BatchNormConfig::new(3).init::<NdArray>(&device);
/// let x = Tensor::<NdArray, 4>::random([2, 3, 4, 4], Distribution::Default, &device);
/// let ours = vlgo_core::layers::batch_norm_module(&bn, x.clone());
/// assert!(ours.sub(bn.forward(x)).abs().max().into_scalar() < 1e-5);
/// ```
pub fn batch_norm_module<B: LayerBackend, const D: usize>(
    bn: &BatchNorm<B>,
    x: Tensor<B, D>,
) -> Tensor<B, D> {
    let dims = x.dims();
    let device = x.device();
    if B::ad_enabled(&device) {
        let (y, mean, var) = batch_norm_train(x, bn.gamma.val(), bn.beta.val(), bn.epsilon);
        update_running_stats(bn, mean, var);
        y
    } else {
        let mean = bn.running_mean.value().to_device(&device);
        let var = bn.running_var.value().to_device(&device);
        let scale = bn.gamma.val() * var.add_scalar(bn.epsilon).sqrt().recip();
        let shift = bn.beta.val() - mean * scale.clone();
        let y = B::channel_affine(unwrap(as_channels(x)), unwrap(scale), unwrap(shift));
        wrap::<B, 3>(y).reshape(dims)
    }
}

/// `relu(bn.forward(x) + residual)`, the second half of a ResNet block, as one layer: in
/// training one autodiff node (on the shipped CPU backends the batch's statistics, then one pass
/// for the rest) whose backward recomputes the ReLU's input from `x` and `residual`; the running
/// averages are updated as [`batch_norm_module`] updates them. Values and gradients are those
/// of the three operations applied in turn.
///
/// # Panics
/// When `residual`'s shape is not `x`'s (no broadcasting).
///
/// ```
/// use burn::backend::{Autodiff, NdArray};
/// use burn::nn::BatchNormConfig;
/// use burn::prelude::*;
/// use burn::tensor::Distribution;
/// use vlgo_core::layers::{batch_norm_add_relu_module, batch_norm_module};
///
/// type B = Autodiff<NdArray>;
/// let device = Default::default();
/// let bn = BatchNormConfig::new(3).init::<B>(&device);
/// let x = Tensor::<B, 4>::random([2, 3, 4, 4], Distribution::Default, &device);
/// let r = Tensor::<B, 4>::random([2, 3, 4, 4], Distribution::Default, &device);
/// let fused = batch_norm_add_relu_module(&bn, x.clone(), r.clone());
/// let apart = burn::tensor::activation::relu(batch_norm_module(&bn, x) + r);
/// assert!(fused.sub(apart).abs().max().into_scalar() < 1e-6);
/// ```
pub fn batch_norm_add_relu_module<B: LayerBackend>(
    bn: &BatchNorm<B>,
    x: Tensor<B, 4>,
    residual: Tensor<B, 4>,
) -> Tensor<B, 4> {
    assert_eq!(
        residual.dims(),
        x.dims(),
        "batch_norm_add_relu_module: the residual must have the input's shape"
    );
    if !B::ad_enabled(&x.device()) {
        return burn::tensor::activation::relu(batch_norm_module(bn, x) + residual);
    }
    let [y, mean, var] = B::batch_norm_add_relu_train(
        unwrap(x),
        unwrap(residual),
        unwrap(bn.gamma.val()),
        unwrap(bn.beta.val()),
        bn.epsilon,
    );
    update_running_stats(bn, wrap(mean), wrap(var));
    wrap(y)
}

/// Blends a training batch's per-channel `mean` and biased `var` into `bn`'s running averages
/// as Burn's `BatchNorm` does (`running * (1 - momentum) + batch * momentum`, detached).
///
/// ```
/// use burn::backend::NdArray;
/// use burn::nn::BatchNormConfig;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// let bn = BatchNormConfig::new(1).with_momentum(0.5).init::<NdArray>(&device);
/// let batch = Tensor::<NdArray, 1>::from_floats([4.0], &device);
/// vlgo_core::layers::update_running_stats(&bn, batch.clone(), batch);
/// // From mean 0 and variance 1: halfway to 4.
/// assert_eq!(bn.running_mean.value_sync().into_data().to_vec::<f32>().unwrap(), vec![2.0]);
/// assert_eq!(bn.running_var.value_sync().into_data().to_vec::<f32>().unwrap(), vec![2.5]);
/// ```
pub fn update_running_stats<B: Backend>(bn: &BatchNorm<B>, mean: Tensor<B, 1>, var: Tensor<B, 1>) {
    let device = mean.device();
    let blend = |running: Tensor<B, 1>, batch: Tensor<B, 1>| {
        running
            .to_device(&device)
            .mul_scalar(1.0 - bn.momentum)
            .add(batch.detach().mul_scalar(bn.momentum))
            .detach()
    };
    bn.running_mean
        .update(blend(bn.running_mean.value_sync(), mean));
    bn.running_var
        .update(blend(bn.running_var.value_sync(), var));
}

/// `act(x w + b)` for S independent fully connected layers at once: x [S, N, K], `weight`
/// [S, K, M] and `bias` [S, 1, M] give [S, N, M], where act is LeakyReLU with `negative_slope`
/// (>= 0) when given and the identity otherwise; differentiable on `Autodiff` (one node).
///
/// # Panics
/// When the shapes are not those above (no broadcasting), or the slope is negative.
///
/// On `Flex` and `NdArray` in f32 it runs the kernel of `cpu::dense` (the bias as the product's
/// starting value, the activation in place, its derivative from the output's sign); elsewhere,
/// and for other shapes and dtypes, Burn's `matmul`, sum and `leaky_relu`.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
///
/// let device = Default::default();
/// // Two layers 2 -> 1: the first sums its inputs, the second negates the first input.
/// let x = Tensor::<NdArray, 3>::from_floats([[[1.0, 2.0]], [[3.0, 4.0]]], &device);
/// let w = Tensor::<NdArray, 3>::from_floats([[[1.0], [1.0]], [[-1.0], [0.0]]], &device);
/// let b = Tensor::<NdArray, 3>::from_floats([[[0.5]], [[0.0]]], &device);
/// let y = vlgo_core::layers::batched_linear(x, w, b, Some(0.1));
/// assert_eq!(y.dims(), [2, 1, 1]);
/// let y = y.into_data().to_vec::<f32>().unwrap();
/// assert!((y[0] - 3.5).abs() < 1e-6 && (y[1] + 0.3).abs() < 1e-6);
/// ```
pub fn batched_linear<B: LayerBackend>(
    x: Tensor<B, 3>,
    weight: Tensor<B, 3>,
    bias: Tensor<B, 3>,
    negative_slope: Option<f64>,
) -> Tensor<B, 3> {
    let ([s, _, k], [sw, kw, m], b) = (x.dims(), weight.dims(), bias.dims());
    assert!(
        sw == s && kw == k && b == [s, 1, m],
        "batched_linear: expected x [S, N, K], weight [S, K, M], bias [S, 1, M]; got {:?}, \
         {:?}, {:?}",
        x.dims(),
        weight.dims(),
        b
    );
    assert!(
        negative_slope.is_none_or(|a| a >= 0.0),
        "batched_linear: the LeakyReLU slope must be >= 0, got {negative_slope:?}"
    );
    wrap(B::batched_linear(
        unwrap(x),
        unwrap(weight),
        unwrap(bias),
        negative_slope,
    ))
}

/// x [N, C, ...] as [N, C, S].
fn as_channels<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, 3> {
    let dims = x.dims();
    let (n, c) = (dims[0], dims.get(1).copied().unwrap_or(1));
    let size = dims.iter().skip(2).product();
    x.reshape([n, c, size])
}

pub(crate) fn wrap<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

pub(crate) fn unwrap<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}
