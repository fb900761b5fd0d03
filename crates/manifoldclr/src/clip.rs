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

/// The global L2 norm of the gradients `grads` holds for `module`'s parameters, and, when it
/// exceeds `max_norm`, those gradients scaled so that it equals `max_norm` (factor
/// max_norm / (norm + 1e-6), as PyTorch). Returns the norm before clipping (0 without
/// gradients).
pub fn clip_global_norm<B: AutodiffBackend, M: AutodiffModule<B>>(
    module: &M,
    grads: &mut GradientsParams,
    max_norm: Option<f64>,
) -> f64 {
    let mut visitor = SquaredNorm::<B> { grads, sum: None };
    module.visit(&mut visitor);
    let Some(sum) = visitor.sum else {
        return 0.0;
    };
    let norm = sum.sqrt();
    let value = norm.clone().into_scalar().to_f64();
    if let Some(max) = max_norm
        && value > max
    {
        let factor = (norm + 1e-6).recip() * max;
        module.visit(&mut Scale::<B> { grads, factor });
    }
    value
}
