//! The coefficient encoder q(c | z0, z1).

use burn::prelude::*;
use vlgo_core::{FixedPrior, LaplaceParams, VlgoError};

use crate::mlp::{LaplaceHeads, Mlp};

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type VlgoResult<T> = vlgo_core::Result<T>;

/// Configuration of a [`CoefficientEncoder`]: MLP 2d -> 4F -> 4F -> F with LeakyReLU, then
/// location and log-scale heads F -> M.
#[derive(Config, Debug)]
pub struct CoefficientEncoderConfig {
    /// Feature dimension d (the input is cat(z0, z1), 2d).
    pub feature_dim: usize,
    /// Number of coefficients M.
    pub num_operators: usize,
    /// Width F (512 for images).
    #[config(default = 512)]
    pub width: usize,
    /// The fixed prior whose shift and log-scale offset the heads.
    #[config(default = "FixedPrior::default()")]
    pub prior: FixedPrior,
}

/// Checks that named sizes are >= 1.
pub(crate) fn check_sizes(sizes: &[(&'static str, usize)]) -> VlgoResult<()> {
    match sizes.iter().find(|(_, v)| *v == 0) {
        Some((name, _)) => Err(VlgoError::invalid(name, 0, "must be >= 1")),
        None => Ok(()),
    }
}

impl CoefficientEncoderConfig {
    /// Checks sizes and the prior.
    ///
    /// ```
    /// use vlgo_nn::CoefficientEncoderConfig;
    /// assert!(CoefficientEncoderConfig::new(3, 6).with_width(16).validate().is_ok());
    /// assert!(CoefficientEncoderConfig::new(3, 0).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<()> {
        check_sizes(&[
            ("encoder feature_dim (d)", self.feature_dim),
            ("encoder num_operators (M)", self.num_operators),
            ("encoder width (F)", self.width),
        ])?;
        self.prior.validate()
    }

    /// Builds the encoder.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VlgoResult<CoefficientEncoder<B>> {
        self.validate()?;
        let (d, f) = (self.feature_dim, self.width);
        Ok(CoefficientEncoder {
            mlp: Mlp::new(&[2 * d, 4 * f, 4 * f, f], device),
            heads: LaplaceHeads::new(f, self.num_operators, device),
            shift: self.prior.shift,
            ln_scale: self.prior.scale.ln(),
            feature_dim: d,
        })
    }
}

/// q(c | z0, z1): Laplace location and log-scale per coefficient from a feature pair.
#[derive(Module, Debug)]
pub struct CoefficientEncoder<B: Backend> {
    mlp: Mlp<B>,
    heads: LaplaceHeads<B>,
    #[module(skip)]
    shift: f64,
    #[module(skip)]
    ln_scale: f64,
    #[module(skip)]
    feature_dim: usize,
}

impl<B: Backend> CoefficientEncoder<B> {
    /// Encodes the pair: input cat(sg(z0), sg(z1)); mu = clamp(h_mu, -5, 5) + shift_prior,
    /// log_s = clamp(h_s, -100, 3) + ln(scale_prior).
    pub fn forward(&self, z0: Tensor<B, 2>, z1: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        let d = self.feature_dim;
        if z0.dims() != z1.dims() || z0.dims()[1] != d {
            return Err(VlgoError::ShapeMismatch {
                op: "CoefficientEncoder::forward",
                what: "z0 and z1 must both be [N, d] with d the encoder's feature_dim",
                lhs: z0.dims().to_vec(),
                rhs: z1.dims().to_vec(),
            });
        }
        let h = self
            .mlp
            .forward(Tensor::cat(vec![z0.detach(), z1.detach()], 1));
        let (mu, log_s) = self.heads.forward(h);
        LaplaceParams::new(
            mu.clamp(-5.0, 5.0) + self.shift,
            log_s.clamp(-100.0, 3.0) + self.ln_scale,
        )
    }
}
