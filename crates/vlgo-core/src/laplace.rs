//! Laplace coefficient distributions of variational sparse coding:
//! the reparameterised sample, both threshold variants with straight-through
//! gradients, the Laplace-Laplace KL, the fixed prior and the prior warm-up blend.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Result, VlgoError, check_same_shape};

/// Location and log-scale of a factorised Laplace distribution over M coefficients, [N, M] each.
#[derive(Debug, Clone)]
pub struct LaplaceParams<B: Backend> {
    /// Location mu.
    pub loc: Tensor<B, 2>,
    /// Log-scale ln s (the scale is always positive).
    pub log_scale: Tensor<B, 2>,
}

impl<B: Backend> LaplaceParams<B> {
    /// Checks that location and log-scale have the same shape.
    pub fn new(loc: Tensor<B, 2>, log_scale: Tensor<B, 2>) -> Result<Self> {
        check_same_shape(
            "LaplaceParams",
            "location and log-scale must have the same shape [N, M]",
            &loc.dims(),
            &log_scale.dims(),
        )?;
        Ok(Self { loc, log_scale })
    }

    /// The fixed prior Laplace(shift, scale) broadcast to [N, M] (defaults 0.05 and 0.01, see
    /// [`FixedPrior`]); an invalid prior (a scale <= 0, a non-finite value) is an error, not a
    /// NaN log-scale.
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use vlgo_core::{FixedPrior, LaplaceParams};
    ///
    /// let device = Default::default();
    /// let p = LaplaceParams::<NdArray>::fixed(&FixedPrior::default(), [2, 3], &device).unwrap();
    /// assert_eq!(p.dims(), [2, 3]);
    /// let bad = FixedPrior { shift: 0.0, scale: 0.0 };
    /// assert!(LaplaceParams::<NdArray>::fixed(&bad, [2, 3], &device).is_err());
    /// ```
    pub fn fixed(prior: &FixedPrior, shape: [usize; 2], device: &B::Device) -> Result<Self> {
        prior.validate()?;
        Ok(Self {
            loc: Tensor::full(shape, prior.shift, device),
            log_scale: Tensor::full(shape, prior.scale.ln(), device),
        })
    }

    /// Scale s = exp(log_scale).
    pub fn scale(&self) -> Tensor<B, 2> {
        self.log_scale.clone().exp()
    }

    /// Both tensors detached (stop-gradient).
    pub fn detach(&self) -> Self {
        Self {
            loc: self.loc.clone().detach(),
            log_scale: self.log_scale.clone().detach(),
        }
    }

    /// [N, M].
    pub fn dims(&self) -> [usize; 2] {
        self.loc.dims()
    }
}

/// The fixed Laplace prior of the coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FixedPrior {
    /// Location (the paper's `shift_prior`).
    pub shift: f64,
    /// Scale (the paper's `scale_prior`), > 0.
    pub scale: f64,
}

impl Default for FixedPrior {
    fn default() -> Self {
        Self {
            shift: 0.05,
            scale: 0.01,
        }
    }
}

impl FixedPrior {
    /// Checks the scale is positive and both values are finite.
    pub fn validate(&self) -> Result<()> {
        if !self.shift.is_finite() {
            return Err(VlgoError::invalid(
                "shift_prior",
                self.shift,
                "must be finite",
            ));
        }
        if !(self.scale > 0.0 && self.scale.is_finite()) {
            return Err(VlgoError::invalid(
                "scale_prior",
                self.scale,
                "must be finite and > 0",
            ));
        }
        Ok(())
    }
}

/// Which soft threshold turns a Laplace sample into a sparse coefficient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ThresholdVariant {
    /// Threshold the noise: |eps| < zeta gives exactly 0 (location included), otherwise
    /// mu + sign(eps)(|eps| - zeta). Zero with probability 1 - e^{-zeta/s} whatever mu is. The
    /// shifted soft threshold of the authors' variational sparse coding work: the default.
    #[default]
    Noise,
    /// Threshold the whole sample: sign(c) max(|c| - zeta, 0) (Algorithm 1 read literally).
    Sample,
}

/// Threshold zeta >= 0 and its variant. zeta = 0 gives plain Laplace samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    /// zeta >= 0.
    pub zeta: f64,
    /// Which threshold.
    pub variant: ThresholdVariant,
}

impl Threshold {
    /// A checked threshold: zeta must be finite and >= 0.
    ///
    /// ```
    /// use vlgo_core::{Threshold, ThresholdVariant};
    /// assert!(Threshold::new(0.01, ThresholdVariant::Noise).is_ok());
    /// assert!(Threshold::new(-1.0, ThresholdVariant::Noise).is_err());
    /// assert!(Threshold::new(f64::NAN, ThresholdVariant::Sample).is_err());
    /// ```
    pub fn new(zeta: f64, variant: ThresholdVariant) -> Result<Self> {
        if !(zeta >= 0.0 && zeta.is_finite()) {
            return Err(VlgoError::invalid(
                "threshold zeta",
                zeta,
                "must be finite and >= 0",
            ));
        }
        Ok(Self { zeta, variant })
    }

    /// No threshold: plain Laplace samples.
    pub fn none() -> Self {
        Self {
            zeta: 0.0,
            variant: ThresholdVariant::Noise,
        }
    }
}

/// Laplace noise eps = -s sign(u) ln(clamp(1 - 2|u|, 1e-6, 1)) from u ~ U(-1/2, 1/2).
pub fn laplace_noise<B: Backend>(u: Tensor<B, 2>, scale: Tensor<B, 2>) -> Tensor<B, 2> {
    let tail = (-u.clone().abs() * 2.0 + 1.0).clamp(1e-6, 1.0).log();
    -(scale * u.sign() * tail)
}

/// A reparameterised, thresholded sample c from `params` given the uniform draws `u`
/// (U(-1/2, 1/2), [N, M], e.g. from [`NoiseStreams`](crate::NoiseStreams)).
///
/// Straight-through: the value is the thresholded one, the gradient that of mu + eps, so location
/// and scale receive gradient even where the value is exactly 0.
///
/// Panics when `u` is not the shape of the parameters, like Burn's own ops; [`try_sample`]
/// returns an error instead.
pub fn sample<B: Backend>(
    params: &LaplaceParams<B>,
    u: Tensor<B, 2>,
    threshold: &Threshold,
) -> Tensor<B, 2> {
    try_sample(params, u, threshold).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`sample`]: an error when the uniform draws `u` are not the parameters' shape.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use vlgo_core::{LaplaceParams, Threshold, try_sample};
///
/// let device = Default::default();
/// let q = LaplaceParams::<NdArray>::new(Tensor::zeros([2, 3], &device), Tensor::zeros([2, 3], &device)).unwrap();
/// assert!(try_sample(&q, Tensor::zeros([2, 3], &device), &Threshold::none()).is_ok());
/// assert!(try_sample(&q, Tensor::zeros([3, 2], &device), &Threshold::none()).is_err());
/// ```
pub fn try_sample<B: Backend>(
    params: &LaplaceParams<B>,
    u: Tensor<B, 2>,
    threshold: &Threshold,
) -> Result<Tensor<B, 2>> {
    check_same_shape(
        "sample",
        "the uniform draws u must be [N, M] as the parameters",
        &params.dims(),
        &u.dims(),
    )?;
    let eps = laplace_noise(u, params.scale());
    let raw = params.loc.clone() + eps.clone();
    if threshold.zeta == 0.0 {
        return Ok(raw);
    }
    let zeta = threshold.zeta;
    let value = match threshold.variant {
        ThresholdVariant::Noise => {
            let e = eps.detach();
            let shrunk = params.loc.clone().detach() + e.clone().sign() * (e.clone().abs() - zeta);
            shrunk.mask_fill(e.abs().lower_elem(zeta), 0.0)
        }
        ThresholdVariant::Sample => {
            let r = raw.clone().detach();
            r.clone().sign() * (r.abs() - zeta).clamp_min(0.0)
        }
    };
    Ok(raw.clone() + (value - raw).detach())
}

/// Below this log-scale the terms |mu1 - mu2| / s overflow f32 (e^80 ~ 5.5e34): they are computed
/// with the log-scale clamped here, which only matters for scales under 2e-35.
const LOG_SCALE_FLOOR: f64 = -80.0;

/// KL(q || p) between factorised Laplace distributions, per coefficient
/// |mu1 - mu2| / s2 + ln s2 - ln s1 - 1 + (s1 / s2) exp(-|mu1 - mu2| / s1), summed over M and
/// averaged over the batch. Computed from log-scales so that an encoder scale that
/// underflows in f32 (ln s = -104.6 at the clamp) gives a finite value, not 0 * inf = NaN.
///
/// Panics when the two distributions differ in shape; [`try_kl_divergence`] returns an error.
pub fn kl_divergence<B: Backend>(q: &LaplaceParams<B>, p: &LaplaceParams<B>) -> Tensor<B, 1> {
    try_kl_divergence(q, p).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`kl_divergence`]: an error when q and p are not the same shape [N, M].
pub fn try_kl_divergence<B: Backend>(
    q: &LaplaceParams<B>,
    p: &LaplaceParams<B>,
) -> Result<Tensor<B, 1>> {
    check_same_shape(
        "kl_divergence",
        "q and p must both be [N, M]",
        &q.dims(),
        &p.dims(),
    )?;
    let [batch, _] = q.dims();
    let diff = (q.loc.clone() - p.loc.clone()).abs();
    let (ls1, ls2) = (q.log_scale.clone(), p.log_scale.clone());
    let inv_s1 = (-ls1.clone().clamp_min(LOG_SCALE_FLOOR)).exp();
    let inv_s2 = (-ls2.clone().clamp_min(LOG_SCALE_FLOOR)).exp();
    let last = (ls1.clone() - ls2.clone() - diff.clone() * inv_s1).exp();
    let kl = diff * inv_s2 + ls2 - ls1 - 1.0 + last;
    Ok(kl.sum().div_scalar(batch.max(1) as f64))
}

/// How the learned prior is blended toward the fixed one during warm-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum WarmupBlend {
    /// As the paper writes it: mu = k mu + (1 - k) mu0, s = k s + (1 - k) s0.
    #[default]
    Paper,
    /// As the public code does it: log-scales blended, and mu0 takes the sign of the learned
    /// location.
    PublicCode,
}

/// The prior used at iteration `t` of a warm-up over `warmup` iterations: kappa = min(t / W, 1)
/// blends the learned prior toward `fixed`. `warmup = 0` means no warm-up.
pub fn warmup_prior<B: Backend>(
    learned: &LaplaceParams<B>,
    fixed: &FixedPrior,
    t: u64,
    warmup: u64,
    blend: WarmupBlend,
) -> LaplaceParams<B> {
    let kappa = if warmup == 0 {
        1.0
    } else {
        (t as f64 / warmup as f64).min(1.0)
    };
    if kappa >= 1.0 {
        return learned.clone();
    }
    let (mu0, s0) = (fixed.shift, fixed.scale);
    match blend {
        WarmupBlend::Paper => LaplaceParams {
            loc: learned.loc.clone() * kappa + mu0 * (1.0 - kappa),
            log_scale: (learned.scale() * kappa + s0 * (1.0 - kappa)).log(),
        },
        WarmupBlend::PublicCode => LaplaceParams {
            loc: learned.loc.clone() * kappa
                + learned.loc.clone().detach().sign() * (mu0 * (1.0 - kappa)),
            log_scale: learned.log_scale.clone() * kappa + s0.ln() * (1.0 - kappa),
        },
    }
}
