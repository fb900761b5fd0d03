//! The VLGO model: operators, coefficient encoder and an optional learned prior, with the
//! variational training step (the paper's variational Lie group operators).

use burn::prelude::*;
use vlgo_core::{
    ExpmBackend, FixedPrior, LaplaceParams, LieOperators, LieOperatorsConfig, NoiseStreams,
    Threshold, VlgoError, WarmupBlend, best_of_j_seeded, kl_divergence, sample, try_manifold_loss,
    try_sample, warmup_prior,
};

use crate::encoder::{CoefficientEncoder, CoefficientEncoderConfig, InputNorm};
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
    /// Iteration from which training draws best-of-J (before it: one sample).
    #[config(default = 0)]
    pub best_of_j_from: u64,
    /// Warm-up W of the learned prior in iterations (0: none): kappa = min(t / W, 1) blends it
    /// toward the fixed prior.
    #[config(default = 0)]
    pub prior_warmup: u64,
    /// How the warm-up blends (the paper's form by default).
    #[config(default = "WarmupBlend::Paper")]
    pub warmup_blend: WarmupBlend,
    /// Stop the gradient of the target z1 in L_m (false is the paper's ablation S1).
    #[config(default = true)]
    pub detach_target: bool,
    /// A fixed standardisation of the encoder's inputs ([`InputNorm`]); none by default.
    #[config(default = "None")]
    pub encoder_input_norm: Option<InputNorm>,
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
            .with_input_norm(self.encoder_input_norm.clone())
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
            best_of_j_from: self.best_of_j_from,
            prior_warmup: self.prior_warmup,
            warmup_blend: self.warmup_blend,
            detach_target: self.detach_target,
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
    /// Iteration from which best-of-J applies.
    #[module(skip)]
    pub best_of_j_from: u64,
    /// Warm-up of the learned prior, iterations.
    #[module(skip)]
    pub prior_warmup: u64,
    /// How the warm-up blends.
    #[module(skip)]
    pub warmup_blend: WarmupBlend,
    /// Whether L_m stops the gradient of z1.
    #[module(skip)]
    pub detach_target: bool,
}

/// What one variational step computed.
#[derive(Debug, Clone)]
pub struct VlgoStep<B: Backend> {
    /// The coefficients used for transport (the best-of-J winner), [N, M], with gradient to the
    /// encoder through the straight-through sample.
    pub coefficients: Tensor<B, 2>,
    /// The encoder's distribution.
    pub posterior: LaplaceParams<B>,
    /// The prior of this step (warm-up included), which the KL targets.
    pub prior: LaplaceParams<B>,
    /// T(c) z0, [N, d].
    pub transported: Tensor<B, 2>,
    /// L_m: mean over batch and features of (T(c) z0 - sg(z1))^2.
    pub manifold_loss: Tensor<B, 1>,
    /// KL(q || p), summed over coefficients, averaged over the batch.
    pub kl: Tensor<B, 1>,
    /// L_m + beta KL.
    pub loss: Tensor<B, 1>,
}

/// Turns a shape error of tensor maths into the panic of its panicking form.
fn or_panic<T>(result: VlgoResult<T>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

// Each method that is tensor maths panics on shapes that do not fit and has a `try_*` twin that
// returns the error, as in `vlgo_core` (its crate docs, "Errors").
impl<B: Backend> Vlgo<B> {
    /// The encoder's Laplace distribution q(c | z0, z1). Panics unless z0 and z1 are both
    /// [N, d]; [`try_infer`](Self::try_infer) returns an error instead.
    pub fn infer(&self, z0: Tensor<B, 2>, z1: Tensor<B, 2>) -> LaplaceParams<B> {
        or_panic(self.try_infer(z0, z1))
    }

    /// Fallible [`infer`](Self::infer).
    pub fn try_infer(&self, z0: Tensor<B, 2>, z1: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        self.encoder.try_forward(z0, z1)
    }

    /// The prior's distribution for z0: the learned prior when there is one (fully warmed, as
    /// evaluation and downstream sampling use it), else the fixed one. Panics unless z0 is
    /// [N, d]; [`try_prior_params`](Self::try_prior_params) returns an error instead.
    pub fn prior_params(&self, z0: Tensor<B, 2>) -> LaplaceParams<B> {
        or_panic(self.try_prior_params(z0))
    }

    /// Fallible [`prior_params`](Self::prior_params).
    pub fn try_prior_params(&self, z0: Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        match &self.prior {
            Some(prior) => prior.try_forward(z0),
            None => self.try_fixed_params(&z0),
        }
    }

    /// The fixed prior, broadcast to z0's batch. Panics only on a fixed prior that is not valid
    /// (a scale <= 0), which the config's validation refuses;
    /// [`try_fixed_params`](Self::try_fixed_params) returns an error instead.
    pub fn fixed_params(&self, z0: &Tensor<B, 2>) -> LaplaceParams<B> {
        or_panic(self.try_fixed_params(z0))
    }

    /// Fallible [`fixed_params`](Self::fixed_params).
    pub fn try_fixed_params(&self, z0: &Tensor<B, 2>) -> VlgoResult<LaplaceParams<B>> {
        LaplaceParams::fixed(
            &self.fixed_prior,
            [z0.dims()[0], self.operators.num_operators()],
            &z0.device(),
        )
    }

    /// The prior at training iteration `t`: the learned prior blended toward the fixed one by
    /// the warm-up (`kappa = min(t / W, 1)`), or the fixed prior when none is learned. Panics
    /// unless z0 is [N, d]; [`try_prior_at`](Self::try_prior_at) returns an error instead.
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn::prelude::*;
    /// use vlgo_core::LieOperatorsConfig;
    /// use vlgo_nn::VlgoConfig;
    ///
    /// let device = Default::default();
    /// let model = VlgoConfig::new(LieOperatorsConfig::new(2, 4))
    ///     .with_width(4)
    ///     .with_learned_prior(true)
    ///     .with_prior_warmup(10)
    ///     .init::<NdArray>(&device)
    ///     .unwrap();
    /// let z0 = Tensor::<NdArray, 2>::ones([3, 4], &device);
    /// // At t = 0 the prior is the fixed one: location 0.05 everywhere.
    /// let loc = model.prior_at(z0.clone(), 0).loc.into_data().to_vec::<f32>().unwrap();
    /// assert!(loc.iter().all(|&v| (v - 0.05).abs() < 1e-6));
    /// // A batch of the wrong width is an error from the `try_` form.
    /// assert!(model.try_prior_at(Tensor::ones([3, 5], &device), 0).is_err());
    /// ```
    pub fn prior_at(&self, z0: Tensor<B, 2>, t: u64) -> LaplaceParams<B> {
        or_panic(self.try_prior_at(z0, t))
    }

    /// Fallible [`prior_at`](Self::prior_at).
    pub fn try_prior_at(&self, z0: Tensor<B, 2>, t: u64) -> VlgoResult<LaplaceParams<B>> {
        Ok(match &self.prior {
            Some(prior) => warmup_prior(
                &prior.try_forward(z0)?,
                &self.fixed_prior,
                t,
                self.prior_warmup,
                self.warmup_blend,
            ),
            None => self.try_fixed_params(&z0)?,
        })
    }
}

impl<B: ExpmBackend> Vlgo<B> {
    /// A thresholded sample from the prior for z0 given uniform draws `u` (U(-1/2, 1/2), [N, M]):
    /// coefficients for feature augmentation. Panics on shapes that do not fit;
    /// [`try_sample_prior`](Self::try_sample_prior) returns an error instead.
    pub fn sample_prior(&self, z0: Tensor<B, 2>, u: Tensor<B, 2>) -> Tensor<B, 2> {
        or_panic(self.try_sample_prior(z0, u))
    }

    /// Fallible [`sample_prior`](Self::sample_prior).
    pub fn try_sample_prior(&self, z0: Tensor<B, 2>, u: Tensor<B, 2>) -> VlgoResult<Tensor<B, 2>> {
        try_sample(&self.try_prior_params(z0)?, u, &self.threshold)
    }

    /// T(c) z. Panics on shapes that do not fit; [`try_transport`](Self::try_transport)
    /// returns an error instead.
    pub fn transport(&self, c: Tensor<B, 2>, z: Tensor<B, 2>) -> Tensor<B, 2> {
        self.operators.transport(c, z)
    }

    /// Fallible [`transport`](Self::transport).
    pub fn try_transport(&self, c: Tensor<B, 2>, z: Tensor<B, 2>) -> VlgoResult<Tensor<B, 2>> {
        self.operators.try_transport(c, z)
    }

    /// The variational step's forward pass: infer q(c | z0, z1), draw J samples from host streams
    /// keyed by (`step`, j) (J from `best_of_j_from` on, one sample before), keep the best per
    /// datum, transport z0 with it, and form L_m + beta KL(q || prior at `step`). Panics on shapes
    /// that do not fit; [`try_step`](Self::try_step) returns an error instead.
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
    /// let step = model.step(z0.clone(), z0, &NoiseStreams::new(0), 0);
    /// let grads = step.loss.backward();
    /// // The generators learn from the step: a gradient, and not a zero one.
    /// let g = model.operators.psi().grad(&grads).unwrap();
    /// assert!(g.abs().sum().into_scalar() > 0.0);
    /// ```
    pub fn step(
        &self,
        z0: Tensor<B, 2>,
        z1: Tensor<B, 2>,
        streams: &NoiseStreams,
        step: u64,
    ) -> VlgoStep<B> {
        or_panic(self.try_step(z0, z1, streams, step))
    }

    /// Fallible [`step`](Self::step).
    pub fn try_step(
        &self,
        z0: Tensor<B, 2>,
        z1: Tensor<B, 2>,
        streams: &NoiseStreams,
        step: u64,
    ) -> VlgoResult<VlgoStep<B>> {
        let posterior = self.try_infer(z0.clone(), z1.clone())?;
        let [n, m] = posterior.dims();
        let coefficients = if self.samples > 1 && step >= self.best_of_j_from {
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
        let transported = self.try_transport(coefficients.clone(), z0.clone())?;
        let manifold_loss = if self.detach_target {
            try_manifold_loss(transported.clone(), z1)?
        } else {
            (transported.clone() - z1).square().mean()
        };
        let prior = self.try_prior_at(z0, step)?;
        let kl = kl_divergence(&posterior, &prior);
        let loss = manifold_loss.clone() + kl.clone() * self.beta;
        Ok(VlgoStep {
            coefficients,
            posterior,
            prior,
            transported,
            manifold_loss,
            kl,
            loss,
        })
    }
}
