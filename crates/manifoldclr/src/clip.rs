//! Global gradient-norm clipping of one parameter group (PyTorch's `clip_grad_norm_`; Burn's own
//! clipping works per tensor).

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

struct SquaredNorm<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for SquaredNorm<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.get::<B::InnerBackend, D>(param.id) {
            let s = g.square().sum();
            self.sum = Some(match self.sum.take() {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
}

struct Scale<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    factor: Tensor<B::InnerBackend, 1>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Scale<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            let f = self.factor.clone().reshape([1; D]);
            self.grads.register::<B::InnerBackend, D>(param.id, g * f);
        }
    }
}

/// The global L2 norm of the gradients `grads` holds for `module`'s parameters, shape `[1]` (0
/// without gradients), and, when it exceeds `max_norm`, those gradients scaled so that it equals
/// `max_norm` (factor max_norm / (norm + 1e-6), as PyTorch).
///
/// Nothing is read back: the norm stays on the device (a training step reads it with its loss)
/// and, as in PyTorch, the gradients are multiplied by the factor clamped to 1, which leaves
/// them exactly as they are when the norm is within bounds.
pub fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    max_norm: Option<f64>,
) -> Tensor<B::InnerBackend, 1> {
    let mut visitor = SquaredNorm::<B> { grads, sum: None };
    module.visit(&mut visitor);
    let Some(sum) = visitor.sum else {
        // No parameter with a gradient (an identity head): 0, on the module's device.
        let device = module.devices().into_iter().next().unwrap_or_default();
        return Tensor::zeros([1], &device);
    };
    let norm = sum.sqrt();
    if let Some(max) = max_norm {
        let factor = ((norm.clone() + 1e-6).recip() * max).clamp_max(1.0);
        module.visit(&mut Scale::<B> { grads, factor });
    }
    norm
}
