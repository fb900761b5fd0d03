//! The shipped backends' layer kernels: convolution, batch norm, batched linear layers, AdamW
//! (one impl per backend, as for the exponential: the `Autodiff` impl would overlap a blanket
//! one; [`LayerBackend`](super::LayerBackend) routes to them at run time).

use burn::prelude::*;
use burn::tensor::ops::{ConvOptions, FloatTensor};

/// The shipped backends' kernels of the layers of [`crate::layers`].
///
/// Every method defaults to Burn's own operations; `Flex` and `NdArray` override them with the
/// CPU kernels for f32 (convolutions with one group). Implemented for `NdArray` (feature
/// `ndarray`), `Flex` (`flex`), `CubeBackend` and `Fusion` (`wgpu`, `cuda`) and `Autodiff<B>`
/// over any of them.
pub(crate) trait LayerKernels: Backend {
    /// The convolution of x [N, C_in, H, W] with weight [C_out, C_in / groups, kh, kw].
    fn convolve(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        Self::conv2d(x, weight, None, options)
    }

    /// The adjoints of x and of the weight given the adjoint of the output; each only when
    /// `want` asks for it (`[x, weight]`).
    fn convolve_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        options: ConvOptions<2>,
        want: [bool; 2],
    ) -> [Option<FloatTensor<Self>>; 2] {
        tensor_ops::convolve_backward::<Self>(x, weight, grad, options, want)
    }

    /// Training-mode batch norm of x [N, C, S] with the batch's statistics: the output, the
    /// per-channel mean and the biased variance (both `[C]`).
    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        tensor_ops::batch_norm_train::<Self>(x, gamma, beta, epsilon)
    }

    /// The adjoints of x, gamma and beta of [`batch_norm_train`](Self::batch_norm_train)
    /// given the output's adjoint and the statistics it returned.
    fn batch_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        stats: [FloatTensor<Self>; 2],
        epsilon: f64,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        tensor_ops::batch_norm_backward::<Self>(x, gamma, stats, epsilon, grad)
    }

    /// Training-mode batch norm of x [N, C, H, W] with the batch's statistics, then ReLU, then
    /// a max pooling when `pool` is given: the output, the per-channel mean and the biased
    /// variance (both `[C]`).
    fn batch_norm_relu_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        pool: Option<PoolGeometry>,
    ) -> [FloatTensor<Self>; 3] {
        tensor_ops::batch_norm_relu_train::<Self>(x, gamma, beta, epsilon, pool)
    }

    /// The adjoints of x, gamma and beta of
    /// [`batch_norm_relu_train`](Self::batch_norm_relu_train) given the output's adjoint and
    /// the statistics it returned.
    fn batch_norm_relu_backward(
        x: FloatTensor<Self>,
        [gamma, beta]: [FloatTensor<Self>; 2],
        stats: [FloatTensor<Self>; 2],
        epsilon: f64,
        pool: Option<PoolGeometry>,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3] {
        tensor_ops::batch_norm_relu_backward::<Self>(x, [gamma, beta], stats, epsilon, pool, grad)
    }

    /// relu(batch norm of x + residual) in training mode, x and the residual [N, C, H, W]: the
    /// output, the per-channel mean and the biased variance (both `[C]`).
    fn batch_norm_add_relu_train(
        x: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        tensor_ops::batch_norm_add_relu_train::<Self>(x, residual, gamma, beta, epsilon)
    }

    /// The adjoints of x, gamma, beta and the residual of
    /// [`batch_norm_add_relu_train`](Self::batch_norm_add_relu_train) given the output's
    /// adjoint and the statistics it returned.
    fn batch_norm_add_relu_backward(
        [x, residual]: [FloatTensor<Self>; 2],
        affine: [FloatTensor<Self>; 2],
        stats: [FloatTensor<Self>; 2],
        epsilon: f64,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 4] {
        tensor_ops::batch_norm_add_relu_backward::<Self>(
            [x, residual],
            affine,
            stats,
            epsilon,
            grad,
        )
    }

    /// act(x w + b) for S batched layers, x [S, N, K], w [S, K, M] and b [S, 1, M], as
    /// [S, N, M]; act is LeakyReLU with `negative_slope` when given, the identity otherwise.
    fn batched_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        negative_slope: Option<f64>,
    ) -> FloatTensor<Self> {
        tensor_ops::batched_linear::<Self>(x, weight, bias, negative_slope)
    }

    /// The adjoints of x, the weight and the bias of
    /// [`batched_linear`](Self::batched_linear) given its output and the output's adjoint;
    /// each only when `want` asks for it (`[x, weight, bias]`).
    fn batched_linear_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        output: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        negative_slope: Option<f64>,
        want: [bool; 3],
    ) -> [Option<FloatTensor<Self>>; 3] {
        tensor_ops::batched_linear_backward::<Self>(x, weight, output, grad, negative_slope, want)
    }

    /// One AdamW step on a parameter from its gradient and moments: the new parameter, first
    /// and second moment (see [`FusedAdamW`](super::FusedAdamW)).
    fn adamw_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        moment_1: FloatTensor<Self>,
        moment_2: FloatTensor<Self>,
        step: AdamWStep,
    ) -> [FloatTensor<Self>; 3] {
        tensor_ops::adamw_step::<Self>(param, grad, moment_1, moment_2, step)
    }

    /// The mean over the spatial dimensions of x [N, C, H, W], as [N, C, 1, 1].
    fn global_avg_pool(x: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::adaptive_avg_pool2d(x, [1, 1])
    }

    /// `y = scale[c] x + shift[c]` for x `[N, C, S]`: batch norm in evaluation mode.
    fn channel_affine(
        x: FloatTensor<Self>,
        scale: FloatTensor<Self>,
        shift: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        tensor_ops::channel_affine::<Self>(x, scale, shift)
    }

    /// Max pooling of x [N, C, H, W] (dilation 1, floor mode).
    fn max_pool(x: FloatTensor<Self>, pool: PoolGeometry) -> FloatTensor<Self> {
        let [kernel, stride, padding] = pool;
        Self::max_pool2d(x, kernel, stride, padding, [1, 1], false)
    }

    /// The adjoint of x of [`max_pool`](Self::max_pool) given the output's adjoint.
    fn max_pool_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        pool: PoolGeometry,
    ) -> FloatTensor<Self> {
        tensor_ops::max_pool_backward::<Self>(x, grad, pool)
    }
}

/// A max pooling's kernel size, stride and (symmetric) padding, each [height, width].
pub(crate) type PoolGeometry = [[usize; 2]; 3];

use super::{AdamWStep, unwrap, wrap};

/// The layers from Burn's tensor operations: the defaults, and the fallback of the kernels.
pub(super) mod tensor_ops {
    use super::*;

    /// Burn's adjoint of a max pooling, through the indices of its largest entries.
    pub fn max_pool_backward<B: Backend>(
        x: FloatTensor<B>,
        grad: FloatTensor<B>,
        [kernel, stride, padding]: PoolGeometry,
    ) -> FloatTensor<B> {
        let indices =
            B::max_pool2d_with_indices(x.clone(), kernel, stride, padding, [1, 1], false).indices;
        B::max_pool2d_with_indices_backward(
            x,
            kernel,
            stride,
            padding,
            [1, 1],
            false,
            grad,
            indices,
        )
        .x_grad
    }

    /// Burn's `AdamW` arithmetic, operation by operation.
    pub fn adamw_step<B: Backend>(
        param: FloatTensor<B>,
        grad: FloatTensor<B>,
        moment_1: FloatTensor<B>,
        moment_2: FloatTensor<B>,
        hp: AdamWStep,
    ) -> [FloatTensor<B>; 3] {
        use burn::tensor::TensorMetadata;
        // Elementwise throughout: computed on flat views, returned in the parameter's shape.
        let shape = param.shape();
        let flat = |t: FloatTensor<B>| {
            let n = t.shape().num_elements();
            Tensor::<B, 1>::from_primitive(burn::tensor::TensorPrimitive::Float(t)).reshape([n])
        };
        let back = |t: Tensor<B, 1>| B::float_reshape(unwrap(t), shape.clone());
        let (b1, b2) = (hp.beta_1, hp.beta_2);
        let grad = flat(grad);
        let m = flat(moment_1).mul_scalar(b1) + grad.clone().mul_scalar(1.0 - b1);
        let v = flat(moment_2).mul_scalar(b2) + grad.square().mul_scalar(1.0 - b2);
        let m_hat = m.clone().div_scalar(1.0 - b1.powi(hp.time));
        let v_hat = v.clone().div_scalar(1.0 - b2.powi(hp.time));
        let delta = m_hat / v_hat.sqrt().add_scalar(hp.epsilon);
        let keep = 1.0 - hp.lr * f64::from(hp.weight_decay);
        let p = flat(param).mul_scalar(keep) - delta.mul_scalar(hp.lr);
        [back(p), back(m), back(v)]
    }

    pub fn batched_linear<B: Backend>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        bias: FloatTensor<B>,
        negative_slope: Option<f64>,
    ) -> FloatTensor<B> {
        let y = wrap::<B, 3>(x).matmul(wrap(weight)) + wrap::<B, 3>(bias);
        unwrap(match negative_slope {
            Some(a) => burn::tensor::activation::leaky_relu(y, a),
            None => y,
        })
    }

    pub fn batched_linear_backward<B: Backend>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        output: FloatTensor<B>,
        grad: FloatTensor<B>,
        negative_slope: Option<f64>,
        want: [bool; 3],
    ) -> [Option<FloatTensor<B>>; 3] {
        let grad = wrap::<B, 3>(grad);
        let pre = match negative_slope {
            // LeakyReLU's derivative from the output's sign: 1 where positive, the slope elsewhere.
            Some(a) => {
                let positive = wrap::<B, 3>(output).greater_elem(0.0).float();
                grad * (positive * (1.0 - a) + a)
            }
            None => grad,
        };
        let dx = want[0].then(|| unwrap(pre.clone().matmul(wrap::<B, 3>(weight).swap_dims(1, 2))));
        let dw = want[1].then(|| unwrap(wrap::<B, 3>(x).swap_dims(1, 2).matmul(pre.clone())));
        let db = want[2].then(|| unwrap(pre.sum_dim(1)));
        [dx, dw, db]
    }

    pub fn convolve_backward<B: Backend>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        grad: FloatTensor<B>,
        options: ConvOptions<2>,
        want: [bool; 2],
    ) -> [Option<FloatTensor<B>>; 2] {
        use burn::tensor::TensorMetadata;
        let dx = want[0].then(|| {
            let kernel = &weight.shape()[2..];
            let gapped = (0..2).any(|i| kernel[i] * options.dilation[i] < options.stride[i]);
            match gapped {
                true => conv_x_backward_gapped::<B>(
                    x.shape().dims(),
                    weight.clone(),
                    grad.clone(),
                    &options,
                ),
                false => {
                    B::conv2d_x_backward(x.clone(), weight.clone(), grad.clone(), options.clone())
                }
            }
        });
        let dw = want[1].then(|| B::conv2d_weight_backward(x, weight, grad, options));
        [dx, dw]
    }

    /// The adjoint of x of a convolution whose windows leave gaps (kernel x dilation < stride,
    /// as in ResNet's 1x1 stride-2 shortcut), as a transposed convolution spelled out: the
    /// output's adjoint spread onto the stride grid, a stride-1 convolution with the flipped,
    /// transposed kernel, then the rows the forward pass never read (zero) and the padding
    /// (cropped). Burn 0.21's CubeCL `conv_transpose2d` (behind `conv2d_x_backward` on wgpu and
    /// CUDA) returns zeros for these shapes.
    pub fn conv_x_backward_gapped<B: Backend>(
        [n, c_in, h, w]: [usize; 4],
        weight: FloatTensor<B>,
        grad: FloatTensor<B>,
        options: &ConvOptions<2>,
    ) -> FloatTensor<B> {
        let weight: Tensor<B, 4> = wrap(weight);
        let grad: Tensor<B, 4> = wrap(grad);
        let [c_out, c_in_group, kh, kw] = weight.dims();
        let [_, _, oh, ow] = grad.dims();
        let (g, [sh, sw], [dh, dw]) = (options.groups, options.stride, options.dilation);
        // Zeros of the adjoint's own float type (f16 and bf16 too), on its device.
        let (device, dtype) = (grad.device(), grad.dtype());
        // Zeros between the output's rows and columns: [N, C_out, (oh-1) sh + 1, (ow-1) sw + 1].
        let spread = grad.reshape([n, c_out, oh, 1, ow, 1]);
        let spread = match sh > 1 {
            true => Tensor::cat(
                vec![
                    spread.clone(),
                    Tensor::zeros([n, c_out, oh, sh - 1, ow, 1], (&device, dtype)),
                ],
                3,
            ),
            false => spread,
        };
        let spread = match sw > 1 {
            true => Tensor::cat(
                vec![
                    spread.clone(),
                    Tensor::zeros([n, c_out, oh, sh, ow, sw - 1], (&device, dtype)),
                ],
                5,
            ),
            false => spread,
        };
        let (uh, uw) = ((oh - 1) * sh + 1, (ow - 1) * sw + 1);
        let spread =
            spread
                .reshape([n, c_out, oh * sh, ow * sw])
                .slice([0..n, 0..c_out, 0..uh, 0..uw]);
        // Per group, [C_out / g, C_in / g] becomes [C_in / g, C_out / g]; the taps flip.
        let flipped = weight
            .reshape([g, c_out / g, c_in_group, kh, kw])
            .swap_dims(1, 2)
            .reshape([c_in, c_out / g, kh, kw])
            .flip([2, 3]);
        let full = Tensor::<B, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(B::conv2d(
            unwrap(spread),
            unwrap(flipped),
            None,
            ConvOptions::new([1, 1], [(kh - 1) * dh, (kw - 1) * dw], [dh, dw], g),
        )));
        // `full` covers the padded input up to the last position a window reached.
        let [ph, pw] = options.padding;
        let (fh, fw) = (uh + (kh - 1) * dh, uw + (kw - 1) * dw);
        let padded = Tensor::zeros([n, c_in, h + 2 * ph, w + 2 * pw], (&device, dtype))
            .slice_assign([0..n, 0..c_in, 0..fh, 0..fw], full);
        unwrap(padded.slice([0..n, 0..c_in, ph..ph + h, pw..pw + w]))
    }

    pub fn batch_norm_train<B: Backend>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
    ) -> [FloatTensor<B>; 3] {
        let x: Tensor<B, 3> = wrap(x);
        let [n, c, s] = x.dims();
        let mean_of = |t: Tensor<B, 3>| t.swap_dims(0, 1).reshape([c, n * s]).mean_dim(1);
        let mean = mean_of(x.clone()).reshape([c]);
        let var = mean_of((x.clone() - mean.clone().reshape([1, c, 1])).square()).reshape([c]);
        let scale = wrap::<B, 1>(gamma) * var.clone().add_scalar(epsilon).sqrt().recip();
        let shift = wrap::<B, 1>(beta) - mean.clone() * scale.clone();
        let y = channel_affine::<B>(unwrap(x), unwrap(scale), unwrap(shift));
        [y, unwrap(mean), unwrap(var)]
    }

    pub fn batch_norm_backward<B: Backend>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let (x, grad): (Tensor<B, 3>, Tensor<B, 3>) = (wrap(x), wrap(grad));
        let [n, c, s] = x.dims();
        let channel = |t: Tensor<B, 1>| t.reshape([1, c, 1]);
        let sum = |t: Tensor<B, 3>| t.sum_dim(0).sum_dim(2).reshape([c]);
        let inv_std = wrap::<B, 1>(var).add_scalar(epsilon).sqrt().recip();
        let xhat = (x - channel(wrap(mean))) * channel(inv_std.clone());
        let dbeta = sum(grad.clone());
        let dgamma = sum(grad.clone() * xhat.clone());
        let m = (n * s) as f64;
        // dx = gamma inv_std / m (m dy - sum dy - xhat sum dy xhat)
        let k = channel(wrap::<B, 1>(gamma) * inv_std).div_scalar(m);
        let dx = k * (grad.mul_scalar(m) - channel(dbeta.clone()) - xhat * channel(dgamma.clone()));
        [unwrap(dx), unwrap(dgamma), unwrap(dbeta)]
    }

    /// [N, C, H, W] as [N, C, H W].
    fn planes<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
        use burn::tensor::TensorMetadata;
        let [n, c, h, w] = x.shape().dims::<4>();
        B::float_reshape(x, [n, c, h * w].into())
    }

    /// The normalised activation `scale x + shift` of x [N, C, H, W] from the saved statistics
    /// (scale = gamma / sqrt(var + epsilon), shift = beta - mean scale), in x's shape: what the
    /// fused layers' backwards recompute.
    fn normalised<B: Backend>(
        x: FloatTensor<B>,
        [gamma, beta]: [FloatTensor<B>; 2],
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
    ) -> FloatTensor<B> {
        use burn::tensor::TensorMetadata;
        let shape = x.shape();
        let scale = wrap::<B, 1>(gamma) * wrap::<B, 1>(var).add_scalar(epsilon).sqrt().recip();
        let shift = wrap::<B, 1>(beta) - wrap::<B, 1>(mean) * scale.clone();
        let y = channel_affine::<B>(planes::<B>(x), unwrap(scale), unwrap(shift));
        B::float_reshape(y, shape)
    }

    pub fn batch_norm_relu_train<B: Backend>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
        pool: Option<PoolGeometry>,
    ) -> [FloatTensor<B>; 3] {
        use burn::tensor::TensorMetadata;
        let shape = x.shape();
        let [y, mean, var] = batch_norm_train::<B>(planes::<B>(x), gamma, beta, epsilon);
        let y = B::relu(B::float_reshape(y, shape));
        let y = match pool {
            Some([kernel, stride, padding]) => {
                B::max_pool2d(y, kernel, stride, padding, [1, 1], false)
            }
            None => y,
        };
        [y, mean, var]
    }

    /// The rectified activation recomputed from x, the pooling's and the ReLU's adjoints
    /// through it, then batch norm's.
    pub fn batch_norm_relu_backward<B: Backend>(
        x: FloatTensor<B>,
        [gamma, beta]: [FloatTensor<B>; 2],
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
        pool: Option<PoolGeometry>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        use burn::tensor::TensorMetadata;
        let stats = [mean, var];
        let affine = [gamma.clone(), beta];
        let rectified = B::relu(normalised::<B>(x.clone(), affine, stats.clone(), epsilon));
        let grad = match pool {
            Some(pool) => max_pool_backward::<B>(rectified.clone(), grad, pool),
            None => grad,
        };
        let grad = planes::<B>(B::relu_backward(rectified, grad));
        let [dx, dgamma, dbeta] =
            batch_norm_backward::<B>(planes::<B>(x.clone()), gamma, stats, epsilon, grad);
        [B::float_reshape(dx, x.shape()), dgamma, dbeta]
    }

    pub fn batch_norm_add_relu_train<B: Backend>(
        x: FloatTensor<B>,
        residual: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
    ) -> [FloatTensor<B>; 3] {
        use burn::tensor::TensorMetadata;
        let shape = x.shape();
        let [y, mean, var] = batch_norm_train::<B>(planes::<B>(x), gamma, beta, epsilon);
        let y = B::relu(B::float_add(B::float_reshape(y, shape), residual));
        [y, mean, var]
    }

    /// The ReLU's input recomputed from x and the residual, its adjoint through the mask (the
    /// residual's), then batch norm's.
    pub fn batch_norm_add_relu_backward<B: Backend>(
        [x, residual]: [FloatTensor<B>; 2],
        [gamma, beta]: [FloatTensor<B>; 2],
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        use burn::tensor::TensorMetadata;
        let shape = x.shape();
        let stats = [mean, var];
        let normalised = normalised::<B>(x.clone(), [gamma.clone(), beta], stats.clone(), epsilon);
        let rectified = B::relu(B::float_add(normalised, residual));
        let dr = B::relu_backward(rectified, grad);
        let [dx, dgamma, dbeta] = batch_norm_backward::<B>(
            planes::<B>(x),
            gamma,
            stats,
            epsilon,
            planes::<B>(dr.clone()),
        );
        [B::float_reshape(dx, shape), dgamma, dbeta, dr]
    }

    pub fn channel_affine<B: Backend>(
        x: FloatTensor<B>,
        scale: FloatTensor<B>,
        shift: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let x: Tensor<B, 3> = wrap(x);
        let c = x.dims()[1];
        let channel = |t: FloatTensor<B>| wrap::<B, 1>(t).reshape([1, c, 1]);
        unwrap(x * channel(scale) + channel(shift))
    }
}

/// The CPU kernels on any backend that can lend or copy out its f32 buffers, with the shape
/// checks that send everything else (other dtypes, groups, shapes Burn will reject) to
/// [`tensor_ops`].
#[cfg(any(feature = "ndarray", feature = "flex"))]
mod kernels {
    use burn::tensor::{DType, TensorMetadata};

    use super::*;
    use crate::cpu::adamw;
    use crate::cpu::batch_norm::{self as bn, NormShape};
    use crate::cpu::conv::{self, ConvShape};
    use crate::cpu::dense::{self, DenseShape};
    pub use crate::cpu::host::Host;
    use crate::cpu::pool::{self, PoolShape};
    use crate::layers::timing;

    fn f32s<B: Backend>(tensors: &[&FloatTensor<B>]) -> bool {
        tensors.iter().all(|t| t.dtype() == DType::F32)
    }

    // `timing`'s record names: the shapes and every setting that changes a kernel's work.
    fn conv_label(s: &ConvShape) -> String {
        let ([kh, kw], [sh, sw], [ph, pw]) = (s.kernel, s.stride, s.padding);
        let dilation = match s.dilation {
            [1, 1] => String::new(),
            [dh, dw] => format!(" dilation {dh}x{dw}"),
        };
        format!(
            "[{}, {}, {}, {}] to {} kernel {kh}x{kw} stride {sh}x{sw} padding {ph}x{pw}{dilation}",
            s.batch, s.channels_in, s.height, s.width, s.channels_out
        )
    }

    fn norm_label(s: &NormShape, pool: Option<&PoolShape>) -> String {
        let norm = format!("[{}, {}, {}]", s.batch, s.channels, s.size);
        match pool {
            Some(p) => format!("{norm}, then {}", pool_label(p)),
            None => norm,
        }
    }

    fn pool_label(s: &PoolShape) -> String {
        let ([kh, kw], [sh, sw], [ph, pw]) = (s.kernel, s.stride, s.padding);
        format!(
            "[{}, {}, {}, {}] kernel {kh}x{kw} stride {sh}x{sw} padding {ph}x{pw}",
            s.batch, s.channels, s.height, s.width
        )
    }

    fn dense_label(s: &DenseShape) -> String {
        format!("{} x [{}, {}] to {}", s.splits, s.rows, s.inputs, s.outputs)
    }

    fn conv_shape<B: Backend>(
        x: &FloatTensor<B>,
        weight: &FloatTensor<B>,
        options: &ConvOptions<2>,
    ) -> Option<ConvShape> {
        let (xs, ws) = (x.shape(), weight.shape());
        if !f32s::<B>(&[x, weight])
            || options.groups != 1
            || xs.num_dims() != 4
            || ws.num_dims() != 4
            || xs[1] != ws[1]
        {
            return None;
        }
        let shape = ConvShape {
            batch: xs[0],
            channels_in: xs[1],
            channels_out: ws[0],
            height: xs[2],
            width: xs[3],
            kernel: [ws[2], ws[3]],
            stride: options.stride,
            padding: options.padding,
            dilation: options.dilation,
        };
        let [ho, wo] = shape.output()?;
        (ho * wo * shape.channels_in * shape.channels_out > 0).then_some(shape)
    }

    /// x [N, C, H, W] in f32, with every window of the pooling inside the padded image.
    fn pool_shape<B: Backend>(x: &FloatTensor<B>, pool: &PoolGeometry) -> Option<PoolShape> {
        let xs = x.shape();
        if xs.num_dims() != 4 || !f32s::<B>(&[x]) {
            return None;
        }
        let [kernel, stride, padding] = *pool;
        let shape = PoolShape {
            batch: xs[0],
            channels: xs[1],
            height: xs[2],
            width: xs[3],
            kernel,
            stride,
            padding,
        };
        shape.output().map(|_| shape)
    }

    /// [N, C, S] with every per-channel tensor of length C, all f32.
    fn norm_shape<B: Backend>(
        x: &FloatTensor<B>,
        per_channel: &[&FloatTensor<B>],
    ) -> Option<NormShape> {
        let xs = x.shape();
        let fits = xs.num_dims() == 3
            && f32s::<B>(&[x])
            && f32s::<B>(per_channel)
            && per_channel
                .iter()
                .all(|t| t.shape().num_dims() == 1 && t.shape()[0] == xs[1]);
        fits.then(|| NormShape {
            batch: xs[0],
            channels: xs[1],
            size: xs[2],
        })
    }

    /// x [S, N, K] and w [S, K, M], both f32.
    fn dense_shape<B: Backend>(x: &FloatTensor<B>, weight: &FloatTensor<B>) -> Option<DenseShape> {
        let (xs, ws) = (x.shape(), weight.shape());
        let fits = f32s::<B>(&[x, weight])
            && xs.num_dims() == 3
            && ws.num_dims() == 3
            && ws[0] == xs[0]
            && ws[1] == xs[2];
        fits.then(|| DenseShape {
            splits: xs[0],
            rows: xs[1],
            inputs: xs[2],
            outputs: ws[2],
        })
    }

    /// Whether `t` is an f32 tensor of shape `dims`.
    fn f32_of_shape<B: Backend>(t: &FloatTensor<B>, dims: [usize; 3]) -> bool {
        f32s::<B>(&[t]) && t.shape().num_dims() == 3 && t.shape().dims::<3>() == dims
    }

    pub fn batched_linear<B: Host>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        bias: FloatTensor<B>,
        negative_slope: Option<f64>,
    ) -> FloatTensor<B> {
        let shape = dense_shape::<B>(&x, &weight)
            .filter(|s| f32_of_shape::<B>(&bias, [s.splits, 1, s.outputs]));
        let Some(s) = shape else {
            return tensor_ops::batched_linear::<B>(x, weight, bias, negative_slope);
        };
        timing::timed(
            "linear forward",
            || dense_label(&s),
            || {
                let slope = negative_slope.map(|a| a as f32);
                let y = dense::forward(&s, &B::read(&x), &B::read(&weight), &B::read(&bias), slope);
                B::make(y, &[s.splits, s.rows, s.outputs])
            },
        )
    }

    pub fn batched_linear_backward<B: Host>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        output: FloatTensor<B>,
        grad: FloatTensor<B>,
        negative_slope: Option<f64>,
        want: [bool; 3],
    ) -> [Option<FloatTensor<B>>; 3] {
        let shape = dense_shape::<B>(&x, &weight).filter(|s| {
            let y = [s.splits, s.rows, s.outputs];
            f32_of_shape::<B>(&output, y) && f32_of_shape::<B>(&grad, y)
        });
        let Some(s) = shape else {
            return tensor_ops::batched_linear_backward::<B>(
                x,
                weight,
                output,
                grad,
                negative_slope,
                want,
            );
        };
        timing::timed(
            "linear backward",
            || dense_label(&s),
            || {
                let slope = negative_slope.map(|a| a as f32);
                let (x, w, y, g) = (
                    B::read(&x),
                    B::read(&weight),
                    B::read(&output),
                    B::read(&grad),
                );
                let (dx, dw, db) = dense::backward(&s, &x, &w, &y, &g, slope, want);
                [
                    dx.map(|d| B::make(d, &[s.splits, s.rows, s.inputs])),
                    dw.map(|d| B::make(d, &[s.splits, s.inputs, s.outputs])),
                    db.map(|d| B::make(d, &[s.splits, 1, s.outputs])),
                ]
            },
        )
    }

    pub fn adamw_step<B: Host>(
        param: FloatTensor<B>,
        grad: FloatTensor<B>,
        moment_1: FloatTensor<B>,
        moment_2: FloatTensor<B>,
        hp: AdamWStep,
    ) -> [FloatTensor<B>; 3] {
        let shape = param.shape();
        let fits = f32s::<B>(&[&param, &grad, &moment_1, &moment_2])
            && [&grad, &moment_1, &moment_2]
                .iter()
                .all(|t| t.shape() == shape);
        if !fits {
            return tensor_ops::adamw_step::<B>(param, grad, moment_1, moment_2, hp);
        }
        let dims: Vec<usize> = (0..shape.num_dims()).map(|i| shape[i]).collect();
        timing::timed(
            "adamw step",
            || format!("{dims:?}"),
            || {
                let (p, m, v) = adamw::step(
                    &B::read(&param),
                    &B::read(&grad),
                    &B::read(&moment_1),
                    &B::read(&moment_2),
                    &hp,
                );
                [B::make(p, &dims), B::make(m, &dims), B::make(v, &dims)]
            },
        )
    }

    pub fn convolve<B: Host>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        options: ConvOptions<2>,
    ) -> FloatTensor<B> {
        let Some(s) = conv_shape::<B>(&x, &weight, &options) else {
            return B::conv2d(x, weight, None, options);
        };
        timing::timed(
            "conv forward",
            || conv_label(&s),
            || {
                let out = conv::forward(&s, &B::read(&x), &B::read(&weight), None);
                let [ho, wo] = s.output().expect("checked by conv_shape");
                B::make(out, &[s.batch, s.channels_out, ho, wo])
            },
        )
    }

    pub fn convolve_backward<B: Host>(
        x: FloatTensor<B>,
        weight: FloatTensor<B>,
        grad: FloatTensor<B>,
        options: ConvOptions<2>,
        want: [bool; 2],
    ) -> [Option<FloatTensor<B>>; 2] {
        let s = conv_shape::<B>(&x, &weight, &options).filter(|_| f32s::<B>(&[&grad]));
        let Some(s) = s else {
            return tensor_ops::convolve_backward::<B>(x, weight, grad, options, want);
        };
        timing::timed(
            "conv backward",
            || conv_label(&s),
            || {
                let (x, w, g) = (B::read(&x), B::read(&weight), B::read(&grad));
                let (dx, dw) = conv::backward(&s, &x, &w, &g, want[0], want[1]);
                let [kh, kw] = s.kernel;
                [
                    dx.map(|d| B::make(d, &[s.batch, s.channels_in, s.height, s.width])),
                    dw.map(|d| B::make(d, &[s.channels_out, s.channels_in, kh, kw])),
                ]
            },
        )
    }

    pub fn batch_norm_train<B: Host>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
    ) -> [FloatTensor<B>; 3] {
        let Some(s) = norm_shape::<B>(&x, &[&gamma, &beta]) else {
            return tensor_ops::batch_norm_train::<B>(x, gamma, beta, epsilon);
        };
        timing::timed(
            "batch norm forward",
            || norm_label(&s, None),
            || {
                let (y, mean, var) =
                    bn::forward_train(&s, &B::read(&x), &B::read(&gamma), &B::read(&beta), epsilon);
                [
                    B::make(y, &[s.batch, s.channels, s.size]),
                    B::make(mean, &[s.channels]),
                    B::make(var, &[s.channels]),
                ]
            },
        )
    }

    pub fn batch_norm_backward<B: Host>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let s = norm_shape::<B>(&x, &[&gamma, &mean, &var])
            .filter(|_| f32s::<B>(&[&grad]) && grad.shape() == x.shape());
        let Some(s) = s else {
            return tensor_ops::batch_norm_backward::<B>(x, gamma, [mean, var], epsilon, grad);
        };
        timing::timed(
            "batch norm backward",
            || norm_label(&s, None),
            || {
                let (dx, dgamma, dbeta) = bn::backward(
                    &s,
                    &B::read(&x),
                    &B::read(&gamma),
                    &B::read(&mean),
                    &B::read(&var),
                    epsilon,
                    &B::read(&grad),
                );
                [
                    B::make(dx, &[s.batch, s.channels, s.size]),
                    B::make(dgamma, &[s.channels]),
                    B::make(dbeta, &[s.channels]),
                ]
            },
        )
    }

    /// x [N, C, H, W] as [N, C, H W] with every per-channel tensor of length C, all f32, and
    /// the pooling when given one the kernel takes.
    fn norm_relu_shape<B: Backend>(
        x: &FloatTensor<B>,
        per_channel: &[&FloatTensor<B>],
        pool: Option<PoolGeometry>,
    ) -> Option<(NormShape, Option<PoolShape>)> {
        let xs = x.shape();
        let fits = xs.num_dims() == 4
            && f32s::<B>(&[x])
            && f32s::<B>(per_channel)
            && per_channel
                .iter()
                .all(|t| t.shape().num_dims() == 1 && t.shape()[0] == xs[1]);
        if !fits {
            return None;
        }
        let norm = NormShape {
            batch: xs[0],
            channels: xs[1],
            size: xs[2] * xs[3],
        };
        match pool {
            Some(geometry) => Some((norm, Some(pool_shape::<B>(x, &geometry)?))),
            None => Some((norm, None)),
        }
    }

    pub fn batch_norm_relu_train<B: Host>(
        x: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
        pool: Option<PoolGeometry>,
    ) -> [FloatTensor<B>; 3] {
        let Some((s, ps)) = norm_relu_shape::<B>(&x, &[&gamma, &beta], pool) else {
            return tensor_ops::batch_norm_relu_train::<B>(x, gamma, beta, epsilon, pool);
        };
        timing::timed(
            "batch norm relu forward",
            || norm_label(&s, ps.as_ref()),
            || {
                let (y, mean, var) = bn::relu_forward(
                    &s,
                    &B::read(&x),
                    &B::read(&gamma),
                    &B::read(&beta),
                    epsilon,
                    ps.as_ref(),
                );
                let dims = x.shape().dims::<4>();
                let dims = match ps {
                    Some(ps) => {
                        let [ho, wo] = ps.out();
                        [dims[0], dims[1], ho, wo]
                    }
                    None => dims,
                };
                [
                    B::make(y, &dims),
                    B::make(mean, &[s.channels]),
                    B::make(var, &[s.channels]),
                ]
            },
        )
    }

    pub fn batch_norm_relu_backward<B: Host>(
        x: FloatTensor<B>,
        [gamma, beta]: [FloatTensor<B>; 2],
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
        pool: Option<PoolGeometry>,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 3] {
        let shape =
            norm_relu_shape::<B>(&x, &[&gamma, &beta, &mean, &var], pool).filter(|(_, ps)| {
                // The adjoint of the output exactly: [N, C, Ho, Wo] pooled, x's shape not.
                let mut out = x.shape().dims::<4>();
                if let Some(ps) = ps {
                    [out[2], out[3]] = ps.out();
                }
                let g = grad.shape();
                f32s::<B>(&[&grad]) && g.num_dims() == 4 && g.dims::<4>() == out
            });
        let Some((s, ps)) = shape else {
            return tensor_ops::batch_norm_relu_backward::<B>(
                x,
                [gamma, beta],
                [mean, var],
                epsilon,
                pool,
                grad,
            );
        };
        timing::timed(
            "batch norm relu backward",
            || norm_label(&s, ps.as_ref()),
            || {
                let (dx, dgamma, dbeta) = bn::relu_backward(
                    &s,
                    &B::read(&x),
                    &B::read(&gamma),
                    &B::read(&beta),
                    &B::read(&mean),
                    &B::read(&var),
                    epsilon,
                    ps.as_ref(),
                    &B::read(&grad),
                );
                [
                    B::make(dx, &x.shape().dims::<4>()),
                    B::make(dgamma, &[s.channels]),
                    B::make(dbeta, &[s.channels]),
                ]
            },
        )
    }

    /// x and the residual [N, C, H, W] of one shape, as [N, C, H W], with gamma and beta.
    fn add_relu_shape<B: Backend>(
        x: &FloatTensor<B>,
        residual: &FloatTensor<B>,
        per_channel: &[&FloatTensor<B>],
    ) -> Option<NormShape> {
        let same = f32s::<B>(&[residual]) && residual.shape() == x.shape();
        norm_relu_shape::<B>(x, per_channel, None)
            .filter(|_| same)
            .map(|(s, _)| s)
    }

    pub fn batch_norm_add_relu_train<B: Host>(
        x: FloatTensor<B>,
        residual: FloatTensor<B>,
        gamma: FloatTensor<B>,
        beta: FloatTensor<B>,
        epsilon: f64,
    ) -> [FloatTensor<B>; 3] {
        let Some(s) = add_relu_shape::<B>(&x, &residual, &[&gamma, &beta]) else {
            return tensor_ops::batch_norm_add_relu_train::<B>(x, residual, gamma, beta, epsilon);
        };
        timing::timed(
            "batch norm add relu forward",
            || norm_label(&s, None),
            || {
                let (y, mean, var) = bn::add_relu_forward(
                    &s,
                    &B::read(&x),
                    &B::read(&residual),
                    &B::read(&gamma),
                    &B::read(&beta),
                    epsilon,
                );
                [
                    B::make(y, &x.shape().dims::<4>()),
                    B::make(mean, &[s.channels]),
                    B::make(var, &[s.channels]),
                ]
            },
        )
    }

    pub fn batch_norm_add_relu_backward<B: Host>(
        [x, residual]: [FloatTensor<B>; 2],
        [gamma, beta]: [FloatTensor<B>; 2],
        [mean, var]: [FloatTensor<B>; 2],
        epsilon: f64,
        grad: FloatTensor<B>,
    ) -> [FloatTensor<B>; 4] {
        let s = add_relu_shape::<B>(&x, &residual, &[&gamma, &beta, &mean, &var])
            .filter(|_| f32s::<B>(&[&grad]) && grad.shape() == x.shape());
        let Some(s) = s else {
            return tensor_ops::batch_norm_add_relu_backward::<B>(
                [x, residual],
                [gamma, beta],
                [mean, var],
                epsilon,
                grad,
            );
        };
        timing::timed(
            "batch norm add relu backward",
            || norm_label(&s, None),
            || {
                let (dx, dgamma, dbeta, dr) = bn::add_relu_backward(
                    &s,
                    &B::read(&x),
                    &B::read(&residual),
                    &B::read(&gamma),
                    &B::read(&beta),
                    &B::read(&mean),
                    &B::read(&var),
                    epsilon,
                    &B::read(&grad),
                );
                let dims = x.shape().dims::<4>();
                [
                    B::make(dx, &dims),
                    B::make(dgamma, &[s.channels]),
                    B::make(dbeta, &[s.channels]),
                    B::make(dr, &dims),
                ]
            },
        )
    }

    pub fn max_pool<B: Host>(x: FloatTensor<B>, geometry: PoolGeometry) -> FloatTensor<B> {
        let Some(s) = pool_shape::<B>(&x, &geometry) else {
            let [kernel, stride, padding] = geometry;
            return B::max_pool2d(x, kernel, stride, padding, [1, 1], false);
        };
        timing::timed(
            "max pool forward",
            || pool_label(&s),
            || {
                let out = pool::forward(&s, &B::read(&x));
                let [ho, wo] = s.output().expect("checked by pool_shape");
                B::make(out, &[s.batch, s.channels, ho, wo])
            },
        )
    }

    pub fn max_pool_backward<B: Host>(
        x: FloatTensor<B>,
        grad: FloatTensor<B>,
        geometry: PoolGeometry,
    ) -> FloatTensor<B> {
        let s = pool_shape::<B>(&x, &geometry).filter(|s| {
            let [ho, wo] = s.output().expect("checked by pool_shape");
            f32s::<B>(&[&grad]) && grad.shape().dims::<4>() == [s.batch, s.channels, ho, wo]
        });
        let Some(s) = s else {
            return tensor_ops::max_pool_backward::<B>(x, grad, geometry);
        };
        timing::timed(
            "max pool backward",
            || pool_label(&s),
            || {
                let dx = pool::backward(&s, &B::read(&x), &B::read(&grad));
                B::make(dx, &[s.batch, s.channels, s.height, s.width])
            },
        )
    }

    pub fn channel_affine<B: Host>(
        x: FloatTensor<B>,
        scale: FloatTensor<B>,
        shift: FloatTensor<B>,
    ) -> FloatTensor<B> {
        let Some(s) = norm_shape::<B>(&x, &[&scale, &shift]) else {
            return tensor_ops::channel_affine::<B>(x, scale, shift);
        };
        timing::timed(
            "batch norm eval",
            || norm_label(&s, None),
            || {
                let y = bn::affine(&s, &B::read(&x), &B::read(&scale), &B::read(&shift));
                B::make(y, &[s.batch, s.channels, s.size])
            },
        )
    }
}

/// The trait's methods on a [`Host`](crate::cpu::host::Host) backend.
#[cfg(any(feature = "ndarray", feature = "flex"))]
macro_rules! kernel_methods {
    () => {
        fn convolve(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            options: ConvOptions<2>,
        ) -> FloatTensor<Self> {
            kernels::convolve::<Self>(x, weight, options)
        }

        fn convolve_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            options: ConvOptions<2>,
            want: [bool; 2],
        ) -> [Option<FloatTensor<Self>>; 2] {
            kernels::convolve_backward::<Self>(x, weight, grad, options, want)
        }

        fn batch_norm_train(
            x: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            beta: FloatTensor<Self>,
            epsilon: f64,
        ) -> [FloatTensor<Self>; 3] {
            kernels::batch_norm_train::<Self>(x, gamma, beta, epsilon)
        }

        fn batch_norm_backward(
            x: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            stats: [FloatTensor<Self>; 2],
            epsilon: f64,
            grad: FloatTensor<Self>,
        ) -> [FloatTensor<Self>; 3] {
            kernels::batch_norm_backward::<Self>(x, gamma, stats, epsilon, grad)
        }

        fn channel_affine(
            x: FloatTensor<Self>,
            scale: FloatTensor<Self>,
            shift: FloatTensor<Self>,
        ) -> FloatTensor<Self> {
            kernels::channel_affine::<Self>(x, scale, shift)
        }

        fn batch_norm_relu_train(
            x: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            beta: FloatTensor<Self>,
            epsilon: f64,
            pool: Option<PoolGeometry>,
        ) -> [FloatTensor<Self>; 3] {
            kernels::batch_norm_relu_train::<Self>(x, gamma, beta, epsilon, pool)
        }

        fn batch_norm_relu_backward(
            x: FloatTensor<Self>,
            affine: [FloatTensor<Self>; 2],
            stats: [FloatTensor<Self>; 2],
            epsilon: f64,
            pool: Option<PoolGeometry>,
            grad: FloatTensor<Self>,
        ) -> [FloatTensor<Self>; 3] {
            kernels::batch_norm_relu_backward::<Self>(x, affine, stats, epsilon, pool, grad)
        }

        fn batch_norm_add_relu_train(
            x: FloatTensor<Self>,
            residual: FloatTensor<Self>,
            gamma: FloatTensor<Self>,
            beta: FloatTensor<Self>,
            epsilon: f64,
        ) -> [FloatTensor<Self>; 3] {
            kernels::batch_norm_add_relu_train::<Self>(x, residual, gamma, beta, epsilon)
        }

        fn batch_norm_add_relu_backward(
            inputs: [FloatTensor<Self>; 2],
            affine: [FloatTensor<Self>; 2],
            stats: [FloatTensor<Self>; 2],
            epsilon: f64,
            grad: FloatTensor<Self>,
        ) -> [FloatTensor<Self>; 4] {
            kernels::batch_norm_add_relu_backward::<Self>(inputs, affine, stats, epsilon, grad)
        }

        fn max_pool(x: FloatTensor<Self>, pool: PoolGeometry) -> FloatTensor<Self> {
            kernels::max_pool::<Self>(x, pool)
        }

        fn max_pool_backward(
            x: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            pool: PoolGeometry,
        ) -> FloatTensor<Self> {
            kernels::max_pool_backward::<Self>(x, grad, pool)
        }

        fn adamw_step(
            param: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            moment_1: FloatTensor<Self>,
            moment_2: FloatTensor<Self>,
            step: AdamWStep,
        ) -> [FloatTensor<Self>; 3] {
            kernels::adamw_step::<Self>(param, grad, moment_1, moment_2, step)
        }

        fn batched_linear(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            bias: FloatTensor<Self>,
            negative_slope: Option<f64>,
        ) -> FloatTensor<Self> {
            kernels::batched_linear::<Self>(x, weight, bias, negative_slope)
        }

        fn batched_linear_backward(
            x: FloatTensor<Self>,
            weight: FloatTensor<Self>,
            output: FloatTensor<Self>,
            grad: FloatTensor<Self>,
            negative_slope: Option<f64>,
            want: [bool; 3],
        ) -> [Option<FloatTensor<Self>>; 3] {
            kernels::batched_linear_backward::<Self>(x, weight, output, grad, negative_slope, want)
        }
    };
}

/// The CPU backends lend their buffers to the kernels ([`crate::cpu::host`]).
#[cfg(feature = "ndarray")]
impl<E, I, Q> LayerKernels for burn_ndarray::NdArray<E, I, Q>
where
    E: burn_ndarray::FloatNdArrayElement,
    I: burn_ndarray::IntNdArrayElement,
    Q: burn_ndarray::QuantElement,
    burn_ndarray::NdArrayTensor: From<burn_ndarray::SharedArray<E>>,
    burn_ndarray::NdArrayTensor: From<burn_ndarray::SharedArray<I>>,
{
    kernel_methods!();
}

#[cfg(feature = "flex")]
impl LayerKernels for burn_flex::Flex {
    kernel_methods!();
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R, F, I, BT> LayerKernels for burn_cubecl::CubeBackend<R, F, I, BT>
where
    R: burn_cubecl::CubeRuntime,
    F: burn_cubecl::FloatElement,
    I: burn_cubecl::IntElement,
    BT: burn_cubecl::BoolElement,
{
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<B: burn_fusion::FusionBackend> LayerKernels for burn_fusion::Fusion<B> {}
