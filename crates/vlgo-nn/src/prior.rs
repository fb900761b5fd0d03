//! The learned prior p(c | z0).

use burn::prelude::*;
use vlgo_core::{FixedPrior, LaplaceParams, VlgoError};

use crate::encoder::check_sizes;
use crate::mlp::{LaplaceHeads, Mlp};

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type VlgoResult<T> = vlgo_core::Result<T>;

/// Configuration of a [`CoefficientPrior`]: MLP d -> 4F -> 2F -> F with LeakyReLU, then
/// location and log-scale heads F -> M.
#[derive(Config, Debug)]
pub struct CoefficientPriorConfig {
    /// Feature dimension d.
    pub feature_dim: usize,
    /// Number of coefficients M.
    pub num_operators: usize,
    /// Width F (512 for images).
    #[config(default = 512)]
    pub width: usize,
    /// The fixed prior whose log-scale offsets the scale head.
    #[config(default = "FixedPrior::default()")]
    pub prior: FixedPrior,
}

impl CoefficientPriorConfig {
    /// Checks sizes and the prior.
    ///
    /// ```
    /// use vlgo_nn::CoefficientPriorConfig;
    /// assert!(CoefficientPriorConfig::new(8, 4).validate().is_ok());
    /// assert!(CoefficientPriorConfig::new(0, 4).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<()> {
        check_sizes(&[
            ("prior feature_dim (d)", self.feature_dim),
            ("prior num_operators (M)", self.num_operators),
            ("prior width (F)", self.width),
        ])?;
        self.prior.validate()
    }

    /// Builds the prior network.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VlgoResult<CoefficientPrior<B>> {
        self.validate()?;
        let (d, f) = (self.feature_dim, self.width);
        Ok(CoefficientPrior {
            mlp: Mlp::new(&[d, 4 * f, 2 * f, f], device),
            heads: LaplaceHeads::new(f, self.num_operators, device),
            ln_scale: self.prior.scale.ln(),
            feature_dim: d,
        })
    }
}

/// p(c | z0): Laplace location and log-scale per coefficient from one feature.
#[derive(Module, Debug)]
pub struct CoefficientPrior<B: Backend> {
    mlp: Mlp<B>,
    heads: LaplaceHeads<B>,
    #[module(skip)]
    ln_scale: f64,
    #[module(skip)]
    feature_dim: usize,
}

impl<B: Backend> CoefficientPrior<B> {
    /// Input sg(z0); log_s = min(h_s, 3) + ln(scale_prior), mu = clamp(h_mu, -5, 5). Panics
    /// unless z0 is [N, d]; [`try_forward`](Self::try_forward) returns an error instead.
    pub fn forward(&self, z0: Tensor<B, 2>) -> LaplaceParams<B> {
        self.try_forward(z0).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`forward`](Self::forward): an error, not a panic, for inputs of the wrong shape.
    pub fn try_forward(&self, z0: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        if z0.dims()[1] != self.feature_dim {
            return Err(VlgoError::Shape {
                op: "CoefficientPrior::forward",
                expected: format!("features [N, d] with d = {}", self.feature_dim),
                got: z0.dims().to_vec(),
            });
        }
        let (mu, log_s) = self.heads.forward(self.mlp.forward(z0.detach()));
        LaplaceParams::new(mu.clamp(-5.0, 5.0), log_s.clamp_max(3.0) + self.ln_scale)
    }
}
