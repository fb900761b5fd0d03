//! Forward and backward time of the CPU layer kernels, one layer at a time, at the shapes of the
//! Fashion-MNIST CPU config's ResNet-18 (width 16, max pooling after the stem, both views of a
//! batch of 256 in one batch of 512) and its projection head's batch norm: the per-layer view of
//! `cargo bench --bench step -- --layer-times`, without the rest of the network, so a change to
//! one kernel can be timed in seconds.
//!
//! `cargo bench -p vlgo-core --features flex,layers --bench layers [-- --reps R --batch N
//! --only NAME]` (defaults: 20 reps, batch 512; `--only` keeps the layers whose name contains
//! NAME). Each rep runs one layer's forward and backward on `Autodiff<Flex>`; the kernels' own
//! time is read from `vlgo_core::layers::timing`, so autodiff's bookkeeping is not in it.
//! Printed: the median over the reps and the fastest rep, milliseconds, and the effective
//! bandwidth of the median (the bytes of the layer's inputs and outputs, each counted once).

use burn::backend::{Autodiff, Flex};
use burn::nn::BatchNormConfig;
use burn::nn::pool::MaxPool2dConfig;
use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::ops::ConvOptions;
use vlgo_core::layers::{self, timing};

type B = Autodiff<Flex>;

fn arg(name: &str) -> Option<String> {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter()
        .position(|a| a == name)
        .and_then(|k| argv.get(k + 1).cloned())
}

/// A layer of the network: its name, its input's shape and how it runs.
struct Layer {
    name: String,
    input: [usize; 4],
    kind: Kind,
}

enum Kind {
    /// 3 x 3 (or 1 x 1) convolution to `channels_out`, stride, padding k / 2.
    Conv {
        channels_out: usize,
        kernel: usize,
        stride: usize,
    },
    /// Batch norm and ReLU, then the stem's 3 x 3 stride-2 pooling when `pool`.
    NormRelu { pool: bool },
    /// Batch norm, the residual sum and ReLU.
    NormAddRelu,
    /// Batch norm alone, on [N, C] when the input's spatial size is 1 x 1.
    Norm,
}

fn network(batch: usize) -> Vec<Layer> {
    let mut layers = Vec::new();
    let conv = |c: usize, side: usize, out: usize, kernel: usize, stride: usize| Layer {
        name: format!("conv {c}->{out} {kernel}x{kernel}/{stride} at {side}x{side}"),
        input: [batch, c, side, side],
        kind: Kind::Conv {
            channels_out: out,
            kernel,
            stride,
        },
    };
    layers.push(conv(1, 28, 16, 3, 1));
    layers.push(Layer {
        name: "norm relu pool at 28x28".into(),
        input: [batch, 16, 28, 28],
        kind: Kind::NormRelu { pool: true },
    });
    // Each stage's width, side, and the side of the stage before (its stride-2 input).
    for (c, side, before) in [(16, 14, 0), (32, 7, 14), (64, 4, 7), (128, 2, 4)] {
        layers.push(conv(c, side, c, 3, 1));
        if before > 0 {
            layers.push(conv(c / 2, before, c, 3, 2));
            layers.push(conv(c / 2, before, c, 1, 2));
        }
        layers.push(Layer {
            name: format!("norm relu {c}x{side}x{side}"),
            input: [batch, c, side, side],
            kind: Kind::NormRelu { pool: false },
        });
        layers.push(Layer {
            name: format!("norm add relu {c}x{side}x{side}"),
            input: [batch, c, side, side],
            kind: Kind::NormAddRelu,
        });
        layers.push(Layer {
            name: format!("norm {c}x{side}x{side}"),
            input: [batch, c, side, side],
            kind: Kind::Norm,
        });
    }
    layers.push(Layer {
        name: "norm 1024 (head, 1d)".into(),
        input: [batch, 1024, 1, 1],
        kind: Kind::Norm,
    });
    layers
}

/// A layer's operands, drawn once: the random generator would otherwise take most of the run.
struct Operands {
    x: Tensor<B, 4>,
    /// The convolution's weight, or the residual.
    other: Option<Tensor<B, 4>>,
    dy: Tensor<B, 4>,
}

impl Operands {
    fn new(layer: &Layer, device: &burn::tensor::Device<B>) -> Self {
        let normal = |dims: [usize; 4], std: f64| {
            Tensor::<B, 4>::random(dims, Distribution::Normal(0.0, std), device)
        };
        let [n, c, h, w] = layer.input;
        let (other, out) = match layer.kind {
            Kind::Conv {
                channels_out,
                kernel,
                stride,
            } => {
                let side = |s: usize| (s + 2 * (kernel / 2) - kernel) / stride + 1;
                (
                    Some(normal([channels_out, c, kernel, kernel], 0.1)),
                    [n, channels_out, side(h), side(w)],
                )
            }
            Kind::NormRelu { pool: true } => (None, [n, c, h.div_ceil(2), w.div_ceil(2)]),
            Kind::NormAddRelu => (Some(normal(layer.input, 1.0)), layer.input),
            Kind::NormRelu { pool: false } | Kind::Norm => (None, layer.input),
        };
        Self {
            x: normal(layer.input, 1.0),
            other,
            dy: normal(out, 1.0),
        }
    }
}

/// One forward and backward of `layer`; the kernels' time, forward and backward, in seconds.
fn run(layer: &Layer, ops: &Operands, device: &burn::tensor::Device<B>) -> [f64; 2] {
    let x = ops.x.clone().require_grad();
    let other = || {
        ops.other
            .clone()
            .expect("drawn for this layer")
            .require_grad()
    };
    let [n, c, h, w] = layer.input;
    let bn = BatchNormConfig::new(c).init::<B>(device);
    timing::start();
    let y = match layer.kind {
        Kind::Conv { kernel, stride, .. } => {
            let options = ConvOptions::new([stride; 2], [kernel / 2; 2], [1, 1], 1);
            layers::conv2d(x.clone(), other(), None, options)
        }
        Kind::NormRelu { pool } => {
            // The stem's pooling: 3 x 3, stride 2, padding 1.
            let stem = MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(burn::nn::PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init();
            layers::batch_norm_relu_module(&bn, x.clone(), pool.then_some(&stem))
        }
        Kind::NormAddRelu => layers::batch_norm_add_relu_module(&bn, x.clone(), other()),
        Kind::Norm if h * w == 1 => {
            layers::batch_norm_module(&bn, x.clone().reshape([n, c])).reshape([n, c, 1, 1])
        }
        Kind::Norm => layers::batch_norm_module(&bn, x.clone()),
    };
    let forward = kernels(&timing::finish());
    assert_eq!(y.dims(), ops.dy.dims(), "{}: output shape", layer.name);
    let loss = (y * ops.dy.clone()).sum();
    timing::start();
    let grads = loss.backward();
    let backward = kernels(&timing::finish());
    assert!(x.grad(&grads).is_some(), "{}: no gradient", layer.name);
    [forward, backward]
}

/// The kernels' time in the records, in seconds.
fn kernels(times: &[timing::LayerTime]) -> f64 {
    times.iter().map(|t| t.seconds).sum()
}

/// Bytes of the layer's inputs and outputs, forward and backward, each counted once.
fn bytes(layer: &Layer, ops: &Operands) -> [f64; 2] {
    let size = |t: &Tensor<B, 4>| (t.dims().iter().product::<usize>() * 4) as f64;
    let (x, y) = (size(&ops.x), size(&ops.dy));
    match layer.kind {
        // Forward: x and the weight in, y out. Backward: x, the weight and dy in, dx and the
        // weight's adjoint out.
        Kind::Conv { .. } => {
            let w = ops.other.as_ref().map_or(0.0, size);
            [x + w + y, 2.0 * x + 2.0 * w + y]
        }
        // x in, y out; backward x and dy in, dx out.
        Kind::NormRelu { .. } | Kind::Norm => [x + y, 2.0 * x + y],
        // x and the residual in, y out; backward x, the residual and dy in, dx and dr out.
        Kind::NormAddRelu => [3.0 * x, 5.0 * x],
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    vlgo_core::cpu::host::keep_freed_buffers();
    let reps: usize = arg("--reps").map_or(20, |r| r.parse().expect("--reps takes an integer"));
    let batch: usize = arg("--batch").map_or(512, |b| b.parse().expect("--batch takes an integer"));
    let only = arg("--only");
    let device = Default::default();
    <B as Backend>::seed(&device, 0);
    println!("| layer | input | forward, ms (fastest) | GB/s | backward, ms (fastest) | GB/s |");
    println!("|---|---|---|---|---|---|");
    for layer in network(batch) {
        if only.as_deref().is_some_and(|o| !layer.name.contains(o)) {
            continue;
        }
        let ops = Operands::new(&layer, &device);
        run(&layer, &ops, &device);
        let times: Vec<[f64; 2]> = (0..reps).map(|_| run(&layer, &ops, &device)).collect();
        let [bf, bb] = bytes(&layer, &ops);
        let stat = |k: usize| {
            let v: Vec<f64> = times.iter().map(|t| t[k]).collect();
            let fastest = v.iter().copied().fold(f64::INFINITY, f64::min);
            (median(v), fastest)
        };
        let ((f, f_min), (b, b_min)) = (stat(0), stat(1));
        println!(
            "| {} | {:?} | {:.3} ({:.3}) | {:.1} | {:.3} ({:.3}) | {:.1} |",
            layer.name,
            layer.input,
            f * 1e3,
            f_min * 1e3,
            bf / f / 1e9,
            b * 1e3,
            b_min * 1e3,
            bb / b / 1e9
        );
    }
}
