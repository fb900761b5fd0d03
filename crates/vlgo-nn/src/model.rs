//! The VLGO model: operators, coefficient encoder and an optional learned prior, with the
//! variational training step (`math.md` 2-4).

use burn::prelude::*;
use vlgo_core::{
    ExpmBackend, FixedPrior, LaplaceParams, LieOperators, LieOperatorsConfig, NoiseStreams,
    Threshold, VlgoError, best_of_j_seeded, kl_divergence, manifold_loss, sample,
};

use crate::encoder::{CoefficientEncoder, CoefficientEncoderConfig};
use crate::prior::{CoefficientPrior, CoefficientPriorConfig};

// `#[derive(Config)]` expands to code that names `Result` unqualified.
type VlgoResult<T> = vlgo_core::Result<T>;

/// Configuration of a [`Vlgo`] model.
#[derive(Config, Debug)]
pub struct VlgoConfig {
    /// The operator dictionary (M, d, form, initialisation).
    pub operators: LieOperatorsConfig,
    /// Width F of the encoder and prior networks.
    #[config(default = 512)]
    pub width: usize,
    /// The fixed Laplace prior (the KL's target without a learned prior; offsets the heads).
    #[config(default = "FixedPrior::default()")]
    pub fixed_prior: FixedPrior,
    /// Whether to build a learned prior p(c | z0).
    #[config(default = false)]
    pub learned_prior: bool,
    /// Threshold of the coefficient samples (none: plain Laplace).
    #[config(default = "Threshold::none()")]
    pub threshold: Threshold,
    /// Samples J of best-of-J (>= 1).
    #[config(default = 1)]
    pub samples: usize,
    /// KL weight beta (>= 0).
    #[config(default = 1e-5)]
    pub beta: f64,
}

impl VlgoConfig {
    /// Checks every part.
    ///
    /// ```
    /// use vlgo_core::LieOperatorsConfig;
    /// use vlgo_nn::VlgoConfig;
    /// assert!(VlgoConfig::new(LieOperatorsConfig::new(4, 8)).validate().is_ok());
    /// assert!(VlgoConfig::new(LieOperatorsConfig::new(4, 8)).with_samples(0).validate().is_err());
    /// assert!(VlgoConfig::new(LieOperatorsConfig::new(4, 8)).with_beta(-1.0).validate().is_err());
    /// ```
    pub fn validate(&self) -> VlgoResult<()> {
        self.operators.validate()?;
        self.encoder_config().validate()?;
        Threshold::new(self.threshold.zeta, self.threshold.variant)?;
        if self.samples == 0 {
            return Err(VlgoError::invalid(
                "samples (J)",
                0,
                "best-of-J needs at least one sample",
            ));
        }
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return Err(VlgoError::invalid(
                "beta",
                self.beta,
                "must be finite and >= 0",
            ));
        }
        Ok(())
    }

    fn encoder_config(&self) -> CoefficientEncoderConfig {
        CoefficientEncoderConfig::new(self.operators.dim, self.operators.num_operators)
            .with_width(self.width)
            .with_prior(self.fixed_prior)
    }

    /// Builds the model. The operators draw from their own seed; the encoder and prior layers
    /// from the backend's generator, so call `B::seed` first for a reproducible model.
    pub fn init<B: Backend>(&self, device: &B::Device) -> VlgoResult<Vlgo<B>> {
        self.validate()?;
        let prior = match self.learned_prior {
            true => Some(
                CoefficientPriorConfig::new(self.operators.dim, self.operators.num_operators)
                    .with_width(self.width)
                    .with_prior(self.fixed_prior)
                    .init(device)?,
            ),
            false => None,
        };
        Ok(Vlgo {
            operators: self.operators.init(device)?,
            encoder: self.encoder_config().init(device)?,
            prior,
            fixed_prior: self.fixed_prior,
            threshold: self.threshold,
            samples: self.samples,
            beta: self.beta,
        })
    }
}

/// Operators, coefficient encoder and (optionally) a learned prior.
#[derive(Module, Debug)]
pub struct Vlgo<B: Backend> {
    /// The Lie group operators.
    pub operators: LieOperators<B>,
    /// q(c | z0, z1).
    pub encoder: CoefficientEncoder<B>,
    /// p(c | z0), when learned.
    pub prior: Option<CoefficientPrior<B>>,
    /// The fixed prior.
    #[module(skip)]
    pub fixed_prior: FixedPrior,
    /// Threshold of every coefficient sample.
    #[module(skip)]
    pub threshold: Threshold,
    /// Best-of-J samples per datum.
    #[module(skip)]
    pub samples: usize,
    /// KL weight.
    #[module(skip)]
    pub beta: f64,
}

/// What one variational step computed.
#[derive(Debug, Clone)]
pub struct VlgoStep<B: Backend> {
    /// The coefficients used for transport (the best-of-J winner), [N, M], with gradient to the
    /// encoder through the straight-through sample.
    pub coefficients: Tensor<B, 2>,
    /// The encoder's distribution.
    pub posterior: LaplaceParams<B>,
    /// T(c) z0, [N, d].
    pub transported: Tensor<B, 2>,
    /// L_m: mean over batch and features of (T(c) z0 - sg(z1))^2.
    pub manifold_loss: Tensor<B, 1>,
    /// KL(q || p), summed over coefficients, averaged over the batch.
    pub kl: Tensor<B, 1>,
    /// L_m + beta KL.
    pub loss: Tensor<B, 1>,
}

impl<B: Backend> Vlgo<B> {
    /// The encoder's Laplace distribution q(c | z0, z1).
    pub fn infer(&self, z0: Tensor<B, 2>, z1: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        self.encoder.forward(z0, z1)
    }

    /// The prior's distribution for z0: the learned prior when there is one, else the fixed one.
    pub fn prior_params(&self, z0: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        match &self.prior {
            Some(prior) => prior.forward(z0),
            None => Ok(LaplaceParams::fixed(
                &self.fixed_prior,
                [z0.dims()[0], self.operators.num_operators()],
                &z0.device(),
            )),
        }
    }
}

impl<B: ExpmBackend> Vlgo<B> {
    /// A thresholded sample from the prior for z0 given uniform draws `u` (U(-1/2, 1/2), [N, M]):
    /// coefficients for feature augmentation.
    pub fn sample_prior(&self, z0: Tensor<B, 2>, u: Tensor<B, 2>) -> VlgoResult<Tensor<B, 2>> {
        let params = self.prior_params(z0)?;
        if u.dims() != params.dims() {
            return Err(VlgoError::Shape {
                op: "Vlgo::sample_prior",
                expected: format!("uniform draws [N, M] = {:?}", params.dims()),
                got: u.dims().to_vec(),
            });
        }
        Ok(sample(&params, u, &self.threshold))
    }

    /// T(c) z.
    pub fn transport(&self, c: Tensor<B, 2>, z: Tensor<B, 2>) -> VlgoResult<Tensor<B, 2>> {
        self.operators.transport(c, z)
    }

    /// The variational step's forward pass: infer q(c | z0, z1), draw J samples from host streams
    /// keyed by (`step`, j), keep the best per datum, transport z0 with it, and form
    /// L_m + beta KL(q || prior).
    ///
    /// ```
    /// use burn::backend::{Autodiff, NdArray};
    /// use burn::prelude::*;
    /// use vlgo_core::{LieOperatorsConfig, NoiseStreams};
    /// use vlgo_nn::VlgoConfig;
    ///
    /// type B = Autodiff<NdArray>;
    /// let device = Default::default();
    /// let model = VlgoConfig::new(LieOperatorsConfig::new(4, 8))
    ///     .with_width(8)
    ///     .with_samples(3)
    ///     .init::<B>(&device)
    ///     .unwrap();
    /// let z0 = Tensor::<B, 2>::ones([5, 8], &device);
    /// let step = model.step(z0.clone(), z0, &NoiseStreams::new(0), 0).unwrap();
    /// let grads = step.loss.backward();
    /// assert!(model.operators.psi.grad(&grads).is_some());
    /// ```
    pub fn step(
        &self,
        z0: Tensor<B, 2>,
        z1: Tensor<B, 2>,
        streams: &NoiseStreams,
        step: u64,
    ) -> VlgoResult<VlgoStep<B>> {
        let posterior = self.infer(z0.clone(), z1.clone())?;
        let [n, m] = posterior.dims();
        let coefficients = if self.samples > 1 {
            best_of_j_seeded(
                &self.operators,
                &posterior,
                z0.clone(),
                z1.clone(),
                &self.threshold,
                streams,
                step,
                self.samples,
            )?
            .coefficients
        } else {
            let u = streams.uniform_centered(step, 0, n * m);
            let u = Tensor::<B, 1>::from_floats(u.as_slice(), &z0.device()).reshape([n, m]);
            sample(&posterior, u, &self.threshold)
        };
        let transported = self.transport(coefficients.clone(), z0.clone())?;
        let manifold_loss = manifold_loss(transported.clone(), z1)?;
        let kl = kl_divergence(&posterior, &self.prior_params(z0)?);
        let loss = manifold_loss.clone() + kl.clone() * self.beta;
        Ok(VlgoStep {
            coefficients,
            posterior,
            transported,
            manifold_loss,
            kl,
            loss,
        })
    }
}
