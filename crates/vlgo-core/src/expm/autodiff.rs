//! `Autodiff<B>`: the exponential's forward on the inner backend with a hand-written backward.
//!
//! Generic autodiff through the scheme would also record every elimination step of the solve;
//! these ops record one node each and run the reverse mode of `dense` / `expmv` instead.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::tensor::TensorMetadata;
use burn::tensor::ops::FloatTensor;

use burn::tensor::backend::AutodiffBackend;

use super::backend::{ExpmKernels, expmv_generated_by_ops};
use super::expmv::ExpmvCheckpoints;
use super::{ExpmMethod, ExpmvConfig};

#[derive(Debug)]
struct ExpmBackward;

impl<B: ExpmKernels> Backward<B, 1> for ExpmBackward {
    /// A, the method, and the inner backend's checkpoint where it keeps one.
    type State = (FloatTensor<B>, ExpmMethod, Option<FloatTensor<B>>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_a] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node_a {
            let (a, method, checkpoint) = ops.state;
            let abar = B::expm_backward_checkpointed(a, grad, method, checkpoint);
            grads.register::<B>(node.id, abar);
        }
    }
}

#[derive(Debug)]
struct ExpmvBackward;

/// What the expmv node keeps: A, v and the checkpoints of the Taylor loop.
#[derive(Debug, Clone)]
struct ExpmvState<B: ExpmKernels> {
    a: FloatTensor<B>,
    v: FloatTensor<B>,
    saved: ExpmvCheckpoints<B>,
}

impl<B: ExpmKernels> Backward<B, 2> for ExpmvBackward {
    type State = ExpmvState<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_a, node_v] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let ExpmvState { a, v, saved } = ops.state;
        let (abar, vbar) = B::expmv_backward(a, v, grad, &saved);
        if let Some(node) = node_a {
            grads.register::<B>(node.id, abar);
        }
        if let Some(node) = node_v {
            grads.register::<B>(node.id, vbar);
        }
    }
}

#[derive(Debug)]
struct GeneratedBackward;

/// What the node of exp(A_p) v_p with generated A_p keeps: its inputs and the forward's
/// checkpoints (the generators are formed again in the backward, not kept).
#[derive(Debug, Clone)]
struct GeneratedState<B: ExpmKernels> {
    c: FloatTensor<B>,
    psi: FloatTensor<B>,
    v: FloatTensor<B>,
    saved: ExpmvCheckpoints<B>,
}

impl<B: ExpmKernels> Backward<B, 3> for GeneratedBackward {
    type State = GeneratedState<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let GeneratedState { c, psi, v, saved } = ops.state;
        let adjoints = B::expmv_generated_backward(c, psi, v, grad, &saved);
        for (node, adjoint) in ops.parents.into_iter().zip(adjoints) {
            if let Some(node) = node {
                grads.register::<B>(node.id, adjoint);
            }
        }
    }
}

// The backward methods keep their tensor-op defaults here: on `Autodiff` they are themselves
// recorded, which is what a second-order gradient would need.
impl<B: ExpmKernels, C: CheckpointStrategy> ExpmKernels for Autodiff<B, C> {
    fn expm(a: FloatTensor<Self>, method: ExpmMethod) -> FloatTensor<Self> {
        match ExpmBackward
            .prepare::<C>([a.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (out, checkpoint) = B::expm_checkpointed(a.primitive.clone(), method);
                prep.finish((a.primitive, method, checkpoint), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::expm(a.primitive, method)),
        }
    }

    fn has_generated_kernel(dtype: burn::tensor::DType, psi: &burn::tensor::Shape) -> bool {
        B::has_generated_kernel(dtype, psi)
    }

    /// Forms the generators inside the inner backend's kernel when no input is tracked (best-of-J
    /// candidates, sampling). With a gradient to take, one node for the whole product where the
    /// inner backend has a kernel for it (the CPU backends: each generator formed where it is
    /// used, in the forward and again in the backward); elsewhere the matmul and `expmv` are
    /// recorded.
    fn expmv_generated(
        c: FloatTensor<Self>,
        psi: FloatTensor<Self>,
        v: FloatTensor<Self>,
        config: ExpmvConfig,
    ) -> FloatTensor<Self> {
        if !(c.is_tracked() || psi.is_tracked() || v.is_tracked()) {
            let y = B::expmv_generated(c.primitive, psi.primitive, v.primitive, config);
            return <Self as AutodiffBackend>::from_inner(y);
        }
        if !B::has_generated_kernel(psi.primitive.dtype(), &psi.primitive.shape()) {
            return expmv_generated_by_ops::<Self>(c, psi, v, config);
        }
        let parents = [c.node.clone(), psi.node.clone(), v.node.clone()];
        match GeneratedBackward
            .prepare::<C>(parents)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, saved) = B::expmv_generated_checkpointed(
                    c.primitive.clone(),
                    psi.primitive.clone(),
                    v.primitive.clone(),
                    config,
                );
                let state = GeneratedState {
                    c: c.primitive,
                    psi: psi.primitive,
                    v: v.primitive,
                    saved,
                };
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::expmv_generated(
                c.primitive,
                psi.primitive,
                v.primitive,
                config,
            )),
        }
    }

    fn expmv(a: FloatTensor<Self>, v: FloatTensor<Self>, config: ExpmvConfig) -> FloatTensor<Self> {
        match ExpmvBackward
            .prepare::<C>([a.node.clone(), v.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, saved) =
                    B::expmv_checkpointed(a.primitive.clone(), v.primitive.clone(), config);
                let state = ExpmvState {
                    a: a.primitive,
                    v: v.primitive,
                    saved,
                };
                prep.finish(state, y.into_primitive().tensor())
            }
            OpsKind::UnTracked(prep) => prep.finish(B::expmv(a.primitive, v.primitive, config)),
        }
    }
}
