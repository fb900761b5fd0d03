//! `Autodiff<B>`: the layers' forwards on the inner backend, each one node with its backward by
//! the inner backend's [`LayerKernels`] adjoints.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::ops::{ConvOptions, FloatTensor};

use super::backend::{LayerKernels, PoolGeometry};

#[derive(Debug)]
struct ConvolveBackward;

impl<B: LayerKernels> Backward<B, 2> for ConvolveBackward {
    type State = (FloatTensor<B>, FloatTensor<B>, ConvOptions<2>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_w] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, weight, options) = ops.state;
        let [dx, dw] = B::convolve_backward(
            x,
            weight,
            grad,
            options,
            [node_x.is_some(), node_w.is_some()],
        );
        if let (Some(node), Some(dx)) = (node_x, dx) {
            grads.register::<B>(node.id, dx);
        }
        if let (Some(node), Some(dw)) = (node_w, dw) {
            grads.register::<B>(node.id, dw);
        }
    }
}

#[derive(Debug)]
struct BatchNormBackward;

/// What the batch-norm node keeps: x, gamma, the batch statistics and epsilon.
type BatchNormState<B> = (FloatTensor<B>, FloatTensor<B>, [FloatTensor<B>; 2], f64);

impl<B: LayerKernels> Backward<B, 3> for BatchNormBackward {
    type State = BatchNormState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, stats, epsilon) = ops.state;
        let adjoints = B::batch_norm_backward(x, gamma, stats, epsilon, grad);
        for (node, adjoint) in [node_x, node_gamma, node_beta].into_iter().zip(adjoints) {
            if let Some(node) = node {
                grads.register::<B>(node.id, adjoint);
            }
        }
    }
}

#[derive(Debug)]
struct BatchNormReluBackward;

/// What the fused batch-norm, ReLU (and pooling) node keeps: x, gamma and beta, the batch
/// statistics, epsilon and the pooling; the rectified activation is recomputed from them.
type BatchNormReluState<B> = (
    FloatTensor<B>,
    [FloatTensor<B>; 2],
    [FloatTensor<B>; 2],
    f64,
    Option<PoolGeometry>,
);

impl<B: LayerKernels> Backward<B, 3> for BatchNormReluBackward {
    type State = BatchNormReluState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (x, affine, stats, epsilon, pool) = ops.state;
        let adjoints = B::batch_norm_relu_backward(x, affine, stats, epsilon, pool, grad);
        for (node, adjoint) in ops.parents.into_iter().zip(adjoints) {
            if let Some(node) = node {
                grads.register::<B>(node.id, adjoint);
            }
        }
    }
}

#[derive(Debug)]
struct BatchNormAddReluBackward;

/// What the fused relu(batch norm + residual) node keeps: x and the residual, gamma and beta,
/// the batch statistics and epsilon.
type BatchNormAddReluState<B> = (
    [FloatTensor<B>; 2],
    [FloatTensor<B>; 2],
    [FloatTensor<B>; 2],
    f64,
);

impl<B: LayerKernels> Backward<B, 4> for BatchNormAddReluBackward {
    type State = BatchNormAddReluState<B>;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (inputs, affine, stats, epsilon) = ops.state;
        let adjoints = B::batch_norm_add_relu_backward(inputs, affine, stats, epsilon, grad);
        for (node, adjoint) in ops.parents.into_iter().zip(adjoints) {
            if let Some(node) = node {
                grads.register::<B>(node.id, adjoint);
            }
        }
    }
}

#[derive(Debug)]
struct BatchedLinearBackward;

/// What the batched linear node keeps: x, the weight, the output and the slope.
type BatchedLinearState<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, Option<f64>);

impl<B: LayerKernels> Backward<B, 3> for BatchedLinearBackward {
    type State = BatchedLinearState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (x, weight, output, slope) = ops.state;
        let want = ops.parents.each_ref().map(Option::is_some);
        let adjoints = B::batched_linear_backward(x, weight, output, grad, slope, want);
        for (node, adjoint) in ops.parents.into_iter().zip(adjoints) {
            if let (Some(node), Some(adjoint)) = (node, adjoint) {
                grads.register::<B>(node.id, adjoint);
            }
        }
    }
}

#[derive(Debug)]
struct MaxPoolBackward;

impl<B: LayerKernels> Backward<B, 1> for MaxPoolBackward {
    type State = (FloatTensor<B>, PoolGeometry);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, pool) = ops.state;
        if let Some(node) = node_x {
            grads.register::<B>(node.id, B::max_pool_backward(x, grad, pool));
        }
    }
}

// The backwards keep their defaults here (Burn's own convolution adjoints on `Autodiff`), which is
// what a second-order gradient would need.
impl<B: LayerKernels, C: CheckpointStrategy> LayerKernels for Autodiff<B, C> {
    fn convolve(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        match ConvolveBackward
            .prepare::<C>([x.node.clone(), weight.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::convolve(
                    x.primitive.clone(),
                    weight.primitive.clone(),
                    options.clone(),
                );
                prep.finish((x.primitive, weight.primitive, options), out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::convolve(x.primitive, weight.primitive, options))
            }
        }
    }

    fn max_pool(x: FloatTensor<Self>, pool: PoolGeometry) -> FloatTensor<Self> {
        match MaxPoolBackward
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::max_pool(x.primitive.clone(), pool);
                prep.finish((x.primitive, pool), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::max_pool(x.primitive, pool)),
        }
    }

    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        let prep = BatchNormBackward
            .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
            .compute_bound()
            .stateful();
        let [y, mean, var] = B::batch_norm_train(
            x.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive,
            epsilon,
        );
        // The statistics leave the graph: they only feed the running averages.
        let stats = [
            Self::from_inner(mean.clone()),
            Self::from_inner(var.clone()),
        ];
        let y = match prep {
            OpsKind::Tracked(prep) => {
                prep.finish((x.primitive, gamma.primitive, [mean, var], epsilon), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(y),
        };
        let [mean, var] = stats;
        [y, mean, var]
    }

    fn batch_norm_relu_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        pool: Option<PoolGeometry>,
    ) -> [FloatTensor<Self>; 3] {
        let prep = BatchNormReluBackward
            .prepare::<C>([x.node.clone(), gamma.node.clone(), beta.node.clone()])
            .compute_bound()
            .stateful();
        let [y, mean, var] = B::batch_norm_relu_train(
            x.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive.clone(),
            epsilon,
            pool,
        );
        // The statistics leave the graph: they only feed the running averages.
        let stats = [
            Self::from_inner(mean.clone()),
            Self::from_inner(var.clone()),
        ];
        let y = match prep {
            OpsKind::Tracked(prep) => prep.finish(
                (
                    x.primitive,
                    [gamma.primitive, beta.primitive],
                    [mean, var],
                    epsilon,
                    pool,
                ),
                y,
            ),
            OpsKind::UnTracked(prep) => prep.finish(y),
        };
        let [mean, var] = stats;
        [y, mean, var]
    }

    fn batch_norm_add_relu_train(
        x: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> [FloatTensor<Self>; 3] {
        // Parents in the order of the backward's adjoints: x, gamma, beta, the residual.
        let prep = BatchNormAddReluBackward
            .prepare::<C>([
                x.node.clone(),
                gamma.node.clone(),
                beta.node.clone(),
                residual.node.clone(),
            ])
            .compute_bound()
            .stateful();
        let [y, mean, var] = B::batch_norm_add_relu_train(
            x.primitive.clone(),
            residual.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive.clone(),
            epsilon,
        );
        // The statistics leave the graph: they only feed the running averages.
        let stats = [
            Self::from_inner(mean.clone()),
            Self::from_inner(var.clone()),
        ];
        let y = match prep {
            OpsKind::Tracked(prep) => prep.finish(
                (
                    [x.primitive, residual.primitive],
                    [gamma.primitive, beta.primitive],
                    [mean, var],
                    epsilon,
                ),
                y,
            ),
            OpsKind::UnTracked(prep) => prep.finish(y),
        };
        let [mean, var] = stats;
        [y, mean, var]
    }

    fn batched_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        negative_slope: Option<f64>,
    ) -> FloatTensor<Self> {
        let prep = BatchedLinearBackward
            .prepare::<C>([x.node.clone(), weight.node.clone(), bias.node.clone()])
            .compute_bound()
            .stateful();
        let y = B::batched_linear(
            x.primitive.clone(),
            weight.primitive.clone(),
            bias.primitive,
            negative_slope,
        );
        match prep {
            OpsKind::Tracked(prep) => prep.finish(
                (x.primitive, weight.primitive, y.clone(), negative_slope),
                y,
            ),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }
}
