//! The `vlgo` method's feature augmentation: z~ = T(c~) z with c~ from the learned prior.

use burn::prelude::*;
use vlgo_core::{ExpmBackend, Threshold, ThresholdVariant, sample};
use vlgo_nn::Vlgo;

use crate::error::{ClrError, Result};

/// Draws c~ ~ p(c | z) from a trained model's learned prior, threshold off (plain Laplace
/// samples, as the paper's semi-supervised experiments draw them), and moves features with
/// T(c~) on the features the operators act on (the first S b of them; the rest unchanged).
/// Neither the prior nor the operators receive a gradient: the model is used as it is given
/// (an inner-backend model, or the caller's copy in evaluation mode).
#[derive(Debug)]
pub struct PriorAugment<'a, B: Backend> {
    vlgo: &'a Vlgo<B>,
}

impl<'a, B: ExpmBackend> PriorAugment<'a, B> {
    /// The augmentation of a model with a learned prior; a named error for one without.
    pub fn new(vlgo: &'a Vlgo<B>) -> Result<Self> {
        if vlgo.prior.is_none() {
            return Err(ClrError::invalid(
                "prior",
                "a model with the fixed prior only",
                "a model with a learned prior (ManifoldCLR's p(c | z))",
            ));
        }
        Ok(Self { vlgo })
    }

    /// Coefficients M per sample.
    pub fn coefficients(&self) -> usize {
        self.vlgo.operators.num_operators()
    }

    /// Features the operators act on (S b).
    pub fn dims(&self) -> usize {
        let (s, b) = self.vlgo.operators.blocks();
        s * b
    }

    /// One unthresholded sample c~ per row of `z` ([N, d]) from p(c | z), given uniform draws
    /// `u` ([N, M], U(-1/2, 1/2)).
    pub fn sample(&self, z: Tensor<B, 2>, u: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        let params = self.vlgo.try_prior_params(z.narrow(1, 0, self.dims()))?;
        if u.dims() != params.dims() {
            return Err(ClrError::invalid(
                "uniform draws",
                format!("{:?}", u.dims()),
                format!("the prior's shape [N, M] = {:?}", params.dims()),
            ));
        }
        let off = Threshold {
            zeta: 0.0,
            variant: ThresholdVariant::Noise,
        };
        Ok(sample(&params, u, &off))
    }

    /// T(c) z: the operators' features moved, the others unchanged.
    pub fn apply(&self, c: Tensor<B, 2>, z: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        transport_features(self.vlgo, c, z)
    }
}

/// T(c) z on a model's full features: the first S b (those the operators act on) moved, the
/// others unchanged (all are moved but for the direct methods). Prior augmentation and the
/// diagnostics of a trained run share it.
pub fn transport_features<B: ExpmBackend>(
    vlgo: &Vlgo<B>,
    c: Tensor<B, 2>,
    z: Tensor<B, 2>,
) -> Result<Tensor<B, 2>> {
    let [_, d] = z.dims();
    let (s, b) = vlgo.operators.blocks();
    let k = s * b;
    let moved = vlgo.try_transport(c, z.clone().narrow(1, 0, k))?;
    Ok(match k < d {
        true => Tensor::cat(vec![moved, z.narrow(1, k, d - k)], 1),
        false => moved,
    })
}
