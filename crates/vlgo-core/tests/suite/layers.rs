//! `vlgo_core::layers` against Burn's own layers: values and gradients of the convolution (x,
//! weight, bias) over the geometries a ResNet uses and a few it does not; batch norm's output,
//! gradients and running averages in training and evaluation mode.

use burn::module::AutodiffModule;
use burn::nn::conv::Conv2dConfig;
use burn::nn::pool::MaxPool2dConfig;
use burn::nn::{BatchNormConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::ops::ConvOptions;
use vlgo_core::layers::{
    batch_norm_add_relu_module, batch_norm_module, batch_norm_relu_module, conv2d, conv2d_module,
    max_pool2d_module,
};

use crate::common::AD;

fn max_diff<BK: Backend, const D: usize>(a: Tensor<BK, D>, b: Tensor<BK, D>) -> f32 {
    a.sub(b).abs().max().into_scalar().elem()
}

fn max_abs<BK: Backend, const D: usize>(a: Tensor<BK, D>) -> f32 {
    a.abs().max().into_scalar().elem()
}

/// Asserts `ours` within 1e-4 of `theirs`, relative to the largest entry of `theirs` plus one.
fn assert_close<BK: Backend, const D: usize>(
    theirs: Tensor<BK, D>,
    ours: Tensor<BK, D>,
    what: &str,
) {
    let tol = 1e-4 * (1.0 + max_abs(theirs.clone()));
    assert!(max_diff(theirs, ours) <= tol, "{what}");
}

/// Asserts the running averages of two batch norms close (see [`assert_close`]).
fn assert_same_running_stats(
    theirs: &burn::nn::BatchNorm<AD>,
    ours: &burn::nn::BatchNorm<AD>,
    case: &str,
) {
    let stat = |bn: &burn::nn::BatchNorm<AD>| (bn.running_mean.value(), bn.running_var.value());
    let ((m0, v0), (m1, v1)) = (stat(theirs), stat(ours));
    assert_close(m0, m1, &format!("{case}: running mean"));
    assert_close(v0, v1, &format!("{case}: running var"));
}

/// Whether the tests run on a CubeCL backend (wgpu, CUDA).
fn cubecl() -> bool {
    cfg!(any(feature = "test-wgpu", feature = "test-cuda"))
}

/// (x dims, weight dims, stride, padding, dilation, groups)
type Case = (
    [usize; 4],
    [usize; 4],
    [usize; 2],
    [usize; 2],
    [usize; 2],
    usize,
);

const CASES: [Case; 9] = [
    ([4, 3, 8, 8], [5, 3, 3, 3], [1, 1], [1, 1], [1, 1], 1),
    // 3 x 3, stride 1, padding 1, at least 8 channels and 7 x 7: the CPU kernels' grid path.
    ([3, 8, 8, 7], [9, 8, 3, 3], [1, 1], [1, 1], [1, 1], 1),
    // A 2 x 2 output map of 64 images: the CPU kernels' per-position path.
    ([64, 4, 2, 2], [5, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1),
    ([3, 4, 9, 7], [6, 4, 3, 3], [2, 2], [1, 1], [1, 1], 1),
    ([5, 4, 8, 8], [8, 4, 1, 1], [2, 2], [0, 0], [1, 1], 1),
    ([40, 2, 4, 4], [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1),
    ([2, 3, 10, 9], [2, 3, 3, 2], [2, 3], [2, 0], [1, 2], 1),
    ([1, 1, 5, 5], [1, 1, 5, 5], [1, 1], [0, 0], [1, 1], 1),
    // Grouped: Burn's path, through the same interface.
    ([2, 4, 6, 6], [4, 2, 3, 3], [1, 1], [1, 1], [1, 1], 2),
];

/// Whether the test backend's own convolution takes the case: Candle's takes only the same
/// stride, padding and dilation on both axes, and its adjoint no groups (it asserts both).
fn backend_takes(case: &Case) -> bool {
    let (_, _, stride, padding, dilation, groups) = case;
    let square = stride[0] == stride[1] && padding[0] == padding[1] && dilation[0] == dilation[1];
    (square && *groups == 1) || !<AD as Backend>::name(&Default::default()).contains("candle")
}

#[test]
fn convolution_and_its_gradients_match_burn() {
    let device = Default::default();
    for (xd, wd, stride, padding, dilation, groups) in CASES.into_iter().filter(backend_takes) {
        let options = ConvOptions::new(stride, padding, dilation, groups);
        let x = Tensor::<AD, 4>::random(xd, Distribution::Normal(0.0, 1.0), &device);
        let w = Tensor::<AD, 4>::random(wd, Distribution::Normal(0.0, 1.0), &device);
        let b = Tensor::<AD, 1>::random([wd[0]], Distribution::Normal(0.0, 1.0), &device);
        let run = |ours: bool| {
            let (x, w, b) = (
                x.clone().detach().require_grad(),
                w.clone().detach().require_grad(),
                b.clone().detach().require_grad(),
            );
            let y = if ours {
                conv2d(x.clone(), w.clone(), Some(b.clone()), options.clone())
            } else {
                burn::tensor::module::conv2d(x.clone(), w.clone(), Some(b.clone()), options.clone())
            };
            // A loss whose output adjoint is not constant: sum(y * sin(y)).
            let loss = (y.clone() * y.clone().sin()).sum();
            let grads = loss.backward();
            (
                y.inner(),
                x.grad(&grads).unwrap(),
                w.grad(&grads).unwrap(),
                b.grad(&grads).unwrap(),
            )
        };
        let (y0, dx0, dw0, db0) = run(false);
        let (y1, dx1, dw1, db1) = run(true);
        let case = format!("x {xd:?} w {wd:?} stride {stride:?} padding {padding:?}");
        assert_eq!(y0.dims(), y1.dims(), "{case}");
        let tol = |t: f32| 1e-5 * (1.0 + t) * 10.0;
        assert_close(y0, y1, &format!("{case}: output"));
        // Where the windows leave gaps (kernel x dilation < stride), Burn's own adjoint of x is
        // wrong on CubeCL backends; `convolution_gradients_match_sums_on_the_host` checks ours.
        let gapped = (0..2).any(|i| wd[2 + i] * dilation[i] < stride[i]);
        assert!(
            max_diff(dx0.clone(), dx1) <= tol(max_abs(dx0)) || (gapped && cubecl()),
            "{case}: dx"
        );
        assert_close(dw0, dw1, &format!("{case}: dw"));
        assert_close(db0, db1, &format!("{case}: db"));
    }
}

/// The convolution's output and its adjoints of x and w for the output adjoint `g`, summed
/// term by term in f64 on the host: a reference that does not share a kernel with any backend.
fn reference_convolution(
    (xd, wd, stride, padding, dilation, groups): Case,
    x: &[f32],
    w: &[f32],
    g: &[f32],
) -> [Vec<f64>; 3] {
    let [n, c_in, h, wi] = xd;
    let [c_out, cg, kh, kw] = wd;
    let out =
        |i: usize| (xd[2 + i] + 2 * padding[i] - dilation[i] * (wd[2 + i] - 1) - 1) / stride[i] + 1;
    let (oh, ow) = (out(0), out(1));
    let (mut y, mut dx, mut dw) = (
        vec![0.0; n * c_out * oh * ow],
        vec![0.0; x.len()],
        vec![0.0; w.len()],
    );
    for b in 0..n {
        for o in 0..c_out {
            let group = o / (c_out / groups);
            for (oy, ox) in (0..oh).flat_map(|i| (0..ow).map(move |j| (i, j))) {
                let yi = ((b * c_out + o) * oh + oy) * ow + ox;
                for (c, ky, kx) in (0..cg)
                    .flat_map(|c| (0..kh).flat_map(move |ky| (0..kw).map(move |kx| (c, ky, kx))))
                {
                    let iy = (oy * stride[0] + ky * dilation[0]).checked_sub(padding[0]);
                    let ix = (ox * stride[1] + kx * dilation[1]).checked_sub(padding[1]);
                    let (Some(iy), Some(ix)) = (iy, ix) else {
                        continue;
                    };
                    if iy >= h || ix >= wi {
                        continue;
                    }
                    let xi = ((b * c_in + group * cg + c) * h + iy) * wi + ix;
                    let wj = ((o * cg + c) * kh + ky) * kw + kx;
                    y[yi] += f64::from(x[xi]) * f64::from(w[wj]);
                    dx[xi] += f64::from(g[yi]) * f64::from(w[wj]);
                    dw[wj] += f64::from(g[yi]) * f64::from(x[xi]);
                }
            }
        }
    }
    [y, dx, dw]
}

/// Against the host's sums rather than Burn's op on the same backend, which would share a
/// backend's defect: Burn 0.21's CubeCL transposed convolution returns zeros for the adjoint of
/// x of a 1x1 stride-2 convolution (ResNet's shortcut), which made the whole network's
/// gradients on wgpu differ from the CPU's.
#[test]
fn convolution_gradients_match_sums_on_the_host() {
    let device = Default::default();
    let gapped: [Case; 3] = [
        ([16, 8, 4, 4], [16, 8, 1, 1], [2, 2], [0, 0], [1, 1], 1),
        ([2, 3, 7, 9], [4, 3, 1, 2], [3, 3], [1, 0], [1, 1], 1),
        ([2, 4, 9, 9], [4, 2, 2, 2], [3, 2], [1, 1], [1, 2], 2),
    ];
    for case in CASES.into_iter().chain(gapped).filter(backend_takes) {
        let (xd, wd, stride, padding, dilation, groups) = case;
        let options = ConvOptions::new(stride, padding, dilation, groups);
        let x = Tensor::<AD, 4>::random(xd, Distribution::Normal(0.0, 1.0), &device);
        let w = Tensor::<AD, 4>::random(wd, Distribution::Normal(0.0, 1.0), &device);
        let (x, w) = (x.require_grad(), w.require_grad());
        let y = conv2d(x.clone(), w.clone(), None, options);
        let g = Tensor::<AD, 4>::random(y.dims(), Distribution::Normal(0.0, 1.0), &device);
        let grads = (y.clone() * g.clone()).sum().backward();
        let host = |t: TensorData| t.to_vec::<f32>().unwrap();
        let ours = [
            host(y.into_data()),
            host(x.grad(&grads).unwrap().into_data()),
            host(w.grad(&grads).unwrap().into_data()),
        ];
        let [x, w, g] = [x, w, g].map(|t| host(t.into_data()));
        let reference = reference_convolution(case, &x, &w, &g);
        for ((name, ours), reference) in ["y", "dx", "dw"].iter().zip(&ours).zip(&reference) {
            let scale = reference.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            let worst = ours
                .iter()
                .zip(reference)
                .map(|(a, b)| (f64::from(*a) - b).abs())
                .fold(0.0, f64::max);
            assert!(
                worst <= 1e-4 * scale,
                "{name} of x {xd:?} w {wd:?} stride {stride:?} padding {padding:?} \
                 dilation {dilation:?}: off by {worst:e} at scale {scale:e}"
            );
        }
    }
}

#[test]
fn only_the_wanted_gradients_are_computed_and_frozen_weights_stay_out() {
    let device = Default::default();
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let x = Tensor::<AD, 4>::random([2, 2, 5, 5], Distribution::Default, &device);
    let w = Tensor::<AD, 4>::random([3, 2, 3, 3], Distribution::Default, &device).require_grad();
    let grads = conv2d(x.clone(), w.clone(), None, options).sum().backward();
    assert!(x.grad(&grads).is_none());
    // d sum(y) / dw[o, c, ki, kj] is the sum of the input window that tap sees: for the
    // bottom-right tap with padding 1, rows and columns 1..5.
    let dw = w.grad(&grads).unwrap();
    let window = x
        .inner()
        .slice([0..2, 0..2, 1..5, 1..5])
        .sum_dim(0)
        .sum_dim(2)
        .sum_dim(3);
    let tap = dw.slice([0..1, 0..2, 2..3, 2..3]).reshape([1, 2, 1, 1]);
    assert!(max_diff(window.reshape([1, 2, 1, 1]), tap) < 1e-4);
}

#[test]
fn module_forward_matches_burns_for_every_padding() {
    let device = Default::default();
    let x = Tensor::<AD, 4>::random([2, 3, 7, 6], Distribution::Default, &device);
    for padding in [
        PaddingConfig2d::Valid,
        PaddingConfig2d::Explicit(1, 1, 1, 1),
        PaddingConfig2d::Explicit(0, 1, 2, 1),
        PaddingConfig2d::Same,
    ] {
        let conv = Conv2dConfig::new([3, 4], [3, 3])
            .with_padding(padding.clone())
            .init::<AD>(&device);
        let ours = conv2d_module(&conv, x.clone());
        let burns = conv.forward(x.clone());
        assert_eq!(ours.dims(), burns.dims(), "{padding:?}");
        assert!(max_diff(ours, burns) < 1e-4, "{padding:?}");
    }
}

/// Values and the input's gradient against Burn's `MaxPool2d`, for the settings the kernel
/// takes and for those that keep Burn's forward (`Same` padding, ceil mode).
#[test]
fn max_pool_and_its_gradient_match_burn() {
    // Candle's pooling takes no padding and has no gradient (both panic): nothing to compare.
    if <AD as Backend>::name(&Default::default()).contains("candle") {
        return;
    }
    let device = Default::default();
    let x = Tensor::<AD, 4>::random([3, 4, 9, 8], Distribution::Default, &device);
    let settings = [
        ([3, 3], [2, 2], PaddingConfig2d::Explicit(1, 1, 1, 1), false),
        ([2, 2], [2, 2], PaddingConfig2d::Valid, false),
        ([3, 2], [1, 2], PaddingConfig2d::Explicit(1, 0, 1, 0), false),
        ([3, 3], [1, 1], PaddingConfig2d::Same, false),
        ([2, 2], [2, 2], PaddingConfig2d::Valid, true),
    ];
    for (kernel, stride, padding, ceil) in settings {
        let pool = MaxPool2dConfig::new(kernel)
            .with_strides(stride)
            .with_padding(padding.clone())
            .with_ceil_mode(ceil)
            .init();
        let run = |ours: bool| {
            let x = x.clone().detach().require_grad();
            let y = if ours {
                max_pool2d_module(&pool, x.clone())
            } else {
                pool.forward(x.clone())
            };
            // A weighted sum, so that every output's adjoint differs.
            let w = Tensor::<AD, 1, Int>::arange(0..y.shape().num_elements() as i64, &device)
                .float()
                .reshape(y.dims());
            let grads = (y.clone() * w).sum().backward();
            (y, x.grad(&grads).expect("x takes part"))
        };
        let ((y, dx), (y_burn, dx_burn)) = (run(true), run(false));
        let what = format!("{kernel:?} {stride:?} {padding:?} ceil {ceil}");
        assert_eq!(y.dims(), y_burn.dims(), "{what}");
        assert!(max_diff(y, y_burn) == 0.0, "{what}");
        assert!(max_diff(dx, dx_burn) == 0.0, "{what}");
    }
}

#[test]
fn batch_norm_matches_burn_in_both_modes() {
    let device = Default::default();
    for dims in [vec![6, 4, 5, 3], vec![9, 3]] {
        let bn = BatchNormConfig::new(dims[1])
            .with_momentum(0.3)
            .init::<AD>(&device);
        // Non-trivial affine parameters, so that gamma's and beta's gradients differ.
        let gamma = Tensor::<AD, 1>::random([dims[1]], Distribution::Normal(1.0, 0.5), &device);
        let beta = Tensor::<AD, 1>::random([dims[1]], Distribution::Normal(0.0, 0.5), &device);
        let bn = burn::nn::BatchNorm {
            gamma: burn::module::Param::from_tensor(gamma),
            beta: burn::module::Param::from_tensor(beta),
            ..bn
        };
        let x = Tensor::<AD, 1>::random(
            [dims.iter().product::<usize>()],
            Distribution::Normal(2.0, 3.0),
            &device,
        );
        let run = |ours: bool, bn: &burn::nn::BatchNorm<AD>| {
            let x = x.clone().detach().require_grad();
            let y = if dims.len() == 4 {
                let x4 = x.clone().reshape([dims[0], dims[1], dims[2], dims[3]]);
                let y = if ours {
                    batch_norm_module(bn, x4)
                } else {
                    bn.forward(x4)
                };
                y.flatten::<1>(0, 3)
            } else {
                let x2 = x.clone().reshape([dims[0], dims[1]]);
                let y = if ours {
                    batch_norm_module(bn, x2)
                } else {
                    bn.forward(x2)
                };
                y.flatten::<1>(0, 1)
            };
            let grads = (y.clone() * y.clone().sin()).sum().backward();
            let dgamma = bn.gamma.grad(&grads).unwrap();
            let dbeta = bn.beta.grad(&grads).unwrap();
            (y.inner(), x.grad(&grads).unwrap(), dgamma, dbeta)
        };
        let (theirs, ours) = (bn.clone(), bn.clone());
        let (y0, dx0, dg0, db0) = run(false, &theirs);
        let (y1, dx1, dg1, db1) = run(true, &ours);
        let case = format!("{dims:?}");
        assert_close(y0, y1, &format!("{case}: output"));
        assert_close(dx0, dx1, &format!("{case}: dx"));
        assert_close(dg0, dg1, &format!("{case}: dgamma"));
        assert_close(db0, db1, &format!("{case}: dbeta"));
        assert_same_running_stats(&theirs, &ours, &case);
        // Evaluation mode (no autodiff): the running averages.
        let (theirs, ours) = (theirs.valid(), ours.valid());
        let x = x.inner().reshape([
            dims[0],
            dims[1],
            dims.get(2).copied().unwrap_or(1),
            dims.get(3).copied().unwrap_or(1),
        ]);
        let (e0, e1) = if dims.len() == 4 {
            (theirs.forward(x.clone()), batch_norm_module(&ours, x))
        } else {
            let x2 = x.reshape([dims[0], dims[1]]);
            let (a, b) = (theirs.forward(x2.clone()), batch_norm_module(&ours, x2));
            (
                a.reshape([dims[0], dims[1], 1, 1]),
                b.reshape([dims[0], dims[1], 1, 1]),
            )
        };
        assert_close(e0, e1, &format!("{case}: evaluation mode"));
    }
}

/// The fused batch norm + ReLU (+ max pooling) against Burn's three layers in turn: output,
/// the gradients of x, gamma and beta, the running averages, and evaluation mode; with no
/// pooling, a pooling the kernels take and one they leave to Burn (ceil mode).
#[test]
fn fused_batch_norm_relu_and_pooling_match_burns_layers() {
    let device = Default::default();
    let candle = <AD as Backend>::name(&device).contains("candle");
    let pools = [
        None,
        Some(
            MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
        ),
        Some(
            MaxPool2dConfig::new([2, 2])
                .with_strides([2, 2])
                .with_ceil_mode(true)
                .init(),
        ),
    ];
    let dims = [5, 3, 7, 6];
    let x = Tensor::<AD, 4>::random(dims, Distribution::Normal(0.5, 2.0), &device);
    let gamma = Tensor::<AD, 1>::from_floats([1.2, -0.8, 0.5], &device);
    let beta = Tensor::<AD, 1>::from_floats([0.3, 0.1, -0.4], &device);
    for pool in &pools {
        // Candle's pooling takes no padding and has no gradient.
        if candle && pool.is_some() {
            continue;
        }
        let bn = burn::nn::BatchNorm {
            gamma: burn::module::Param::from_tensor(gamma.clone()),
            beta: burn::module::Param::from_tensor(beta.clone()),
            ..BatchNormConfig::new(3)
                .with_momentum(0.3)
                .init::<AD>(&device)
        };
        let run = |ours: bool, bn: &burn::nn::BatchNorm<AD>| {
            let x = x.clone().detach().require_grad();
            let y = if ours {
                batch_norm_relu_module(bn, x.clone(), pool.as_ref())
            } else {
                let y = burn::tensor::activation::relu(bn.forward(x.clone()));
                match pool {
                    Some(pool) => pool.forward(y),
                    None => y,
                }
            };
            let grads = (y.clone() * y.clone().sin()).sum().backward();
            let dgamma = bn.gamma.grad(&grads).unwrap();
            let dbeta = bn.beta.grad(&grads).unwrap();
            (y.inner(), x.grad(&grads).unwrap(), dgamma, dbeta)
        };
        let (theirs, ours) = (bn.clone(), bn.clone());
        let (y0, dx0, dg0, db0) = run(false, &theirs);
        let (y1, dx1, dg1, db1) = run(true, &ours);
        let case = format!("{pool:?}");
        assert_eq!(y0.dims(), y1.dims(), "{case}");
        assert_close(y0, y1, &format!("{case}: output"));
        assert_close(dx0, dx1, &format!("{case}: dx"));
        assert_close(dg0, dg1, &format!("{case}: dgamma"));
        assert_close(db0, db1, &format!("{case}: dbeta"));
        assert_same_running_stats(&theirs, &ours, &case);
        let (theirs, ours) = (theirs.valid(), ours.valid());
        let x = x.clone().inner();
        let e0 = burn::tensor::activation::relu(theirs.forward(x.clone()));
        let e0 = match pool {
            Some(pool) => pool.forward(e0),
            None => e0,
        };
        let e1 = batch_norm_relu_module(&ours, x, pool.as_ref());
        assert_close(e0, e1, &format!("{case}: evaluation mode"));
    }
}

/// The fused relu(batch norm + residual) against Burn's batch norm, sum and ReLU in turn:
/// output, the gradients of x, the residual, gamma and beta, the running averages, and
/// evaluation mode.
#[test]
fn fused_batch_norm_residual_and_relu_match_burns_layers() {
    let device = Default::default();
    let dims = [5, 3, 4, 6];
    let x = Tensor::<AD, 4>::random(dims, Distribution::Normal(0.5, 2.0), &device);
    let r = Tensor::<AD, 4>::random(dims, Distribution::Normal(0.0, 1.0), &device);
    let bn = burn::nn::BatchNorm {
        gamma: burn::module::Param::from_tensor(Tensor::from_floats([1.2, -0.8, 0.5], &device)),
        beta: burn::module::Param::from_tensor(Tensor::from_floats([0.3, 0.1, -0.4], &device)),
        ..BatchNormConfig::new(3)
            .with_momentum(0.3)
            .init::<AD>(&device)
    };
    let run = |ours: bool, bn: &burn::nn::BatchNorm<AD>| {
        let (x, r) = (
            x.clone().detach().require_grad(),
            r.clone().detach().require_grad(),
        );
        let y = if ours {
            batch_norm_add_relu_module(bn, x.clone(), r.clone())
        } else {
            burn::tensor::activation::relu(bn.forward(x.clone()) + r.clone())
        };
        let grads = (y.clone() * y.clone().sin()).sum().backward();
        let dgamma = bn.gamma.grad(&grads).unwrap();
        let dbeta = bn.beta.grad(&grads).unwrap();
        let (dx, dr) = (x.grad(&grads).unwrap(), r.grad(&grads).unwrap());
        (y.inner(), dx, dr, dgamma, dbeta)
    };
    let (theirs, ours) = (bn.clone(), bn.clone());
    let (y0, dx0, dr0, dg0, db0) = run(false, &theirs);
    let (y1, dx1, dr1, dg1, db1) = run(true, &ours);
    assert_close(y0, y1, "output");
    assert_close(dx0, dx1, "dx");
    assert_close(dr0, dr1, "d residual");
    assert_close(dg0, dg1, "dgamma");
    assert_close(db0, db1, "dbeta");
    assert_same_running_stats(&theirs, &ours, "residual");
    let (theirs, ours) = (theirs.valid(), ours.valid());
    let (x, r) = (x.inner(), r.inner());
    let e0 = burn::tensor::activation::relu(theirs.forward(x.clone()) + r.clone());
    let e1 = batch_norm_add_relu_module(&ours, x, r);
    assert_close(e0, e1, "evaluation mode");
}

#[test]
fn batched_linear_and_its_gradients_match_burn() {
    use burn::tensor::activation::leaky_relu;
    use vlgo_core::layers::batched_linear;
    let device = Default::default();
    for (splits, slope) in [(1, Some(0.01)), (3, Some(0.2)), (2, None)] {
        let normal = |dims: [usize; 3]| {
            Tensor::<AD, 3>::random(dims, Distribution::Normal(0.0, 1.0), &device)
        };
        let (x, w, b) = (
            normal([splits, 7, 5]),
            normal([splits, 5, 300]),
            normal([splits, 1, 300]),
        );
        let g = normal([splits, 7, 300]);
        let run = |ours: bool| {
            let (x, w, b) = (
                x.clone().detach().require_grad(),
                w.clone().detach().require_grad(),
                b.clone().detach().require_grad(),
            );
            let y = if ours {
                batched_linear(x.clone(), w.clone(), b.clone(), slope)
            } else {
                let pre = x.clone().matmul(w.clone()) + b.clone();
                match slope {
                    Some(a) => leaky_relu(pre, a),
                    None => pre,
                }
            };
            let grads = (y.clone() * g.clone()).sum().backward();
            let grad = |t: &Tensor<AD, 3>| t.grad(&grads).expect("tracked");
            (y.inner(), [grad(&x), grad(&w), grad(&b)])
        };
        let ((y, ours), (y_ref, theirs)) = (run(true), run(false));
        let scale = max_abs(y_ref.clone());
        assert!(
            max_diff(y, y_ref) <= 1e-5 * scale,
            "{splits} splits: output"
        );
        for (name, (a, b)) in ["x", "weight", "bias"]
            .iter()
            .zip(ours.into_iter().zip(theirs))
        {
            let scale = max_abs(b.clone());
            let diff = max_diff(a, b);
            assert!(
                diff <= 1e-5 * scale,
                "{splits} splits, slope {slope:?}: {name} {diff}"
            );
        }
    }
}

#[test]
fn fused_adamw_takes_burns_adamw_steps() {
    use burn::module::Param;
    use burn::nn::LinearConfig;
    use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
    use vlgo_core::layers::FusedAdamWConfig;
    let device = Default::default();
    let mut start = LinearConfig::new(6, 4).init::<AD>(&device);
    // Parameters initialise lazily, each clone on its own: fix the values before cloning.
    start.weight = Param::from_tensor(start.weight.val());
    start.bias = start.bias.map(|b| Param::from_tensor(b.val()));
    let x = Tensor::<AD, 2>::random([8, 6], Distribution::Normal(0.0, 1.0), &device);
    let train = |fused: bool| {
        let mut model = start.clone();
        let mut burns = AdamWConfig::new().with_weight_decay(0.05).init::<AD, _>();
        let mut ours = FusedAdamWConfig::new()
            .with_weight_decay(0.05)
            .init::<AD, _>();
        for _ in 0..4 {
            let loss = model.forward(x.clone()).tanh().sum();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = match fused {
                true => ours.step(0.1, model, grads),
                false => burns.step(0.1, model, grads),
            };
        }
        model
    };
    let (a, b) = (train(true), train(false));
    let moved = max_abs(a.weight.val().inner() - start.weight.val().inner());
    assert!(moved > 0.1, "four steps of 0.1 move the weights ({moved})");
    let diff = max_diff(a.weight.val().inner(), b.weight.val().inner());
    assert!(diff < 1e-5, "weights differ by {diff}");
    let bias = |m: &burn::nn::Linear<AD>| m.bias.as_ref().expect("bias").val().inner();
    assert!(max_diff(bias(&a), bias(&b)) < 1e-5);
}
