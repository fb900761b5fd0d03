//! The Lie group part of the ManifoldCLR methods: settings, the VLGO model in the
//! backbone's feature space, and the feature augmentation and losses of one step.
//!
//! A ManifoldCLR step takes the backbone features z0, z1 of a batch's two views and
//! - trains the operators, encoder and prior with L_m + beta KL (the encoder sees detached
//!   features; L_m trains the backbone through z0, and through z1 too without the stop-gradient:
//!   ablation S1; `backbone_grad` scales that gradient, 0 stops it);
//! - augments z0 with one thresholded sample of the prior, z0~ = T(c~) z0, c~ ~ p(c | sg(z0))
//!   (the fixed prior with ablation S4; no augmentation with S2);
//! - contrasts (z0~, z1) with InfoNCE: through the head (h(z0~) its own pass, h(z1) from the
//!   pass over both views) or on the raw features with the clean z0 as extra negatives.

use burn::prelude::*;
use serde::{Deserialize, Serialize};
use vlgo_core::{
    ExpmBackend, FixedPrior, LaplaceParams, LieOperatorsConfig, NoiseStreams, OperatorForm,
    Threshold, ThresholdVariant, WarmupBlend, sample, try_distance_improvement_tensor,
};
use vlgo_nn::{Vlgo, VlgoConfig};

use crate::error::{ClrError, Result};

/// Noise streams of the augmentation and of the mixing weights, apart from the VLGO step's
/// (which uses streams 0..J of each iteration).
const AUGMENT_STREAM: u64 = 1 << 40;
const MIXUP_STREAM: u64 = (1 << 40) + 1;

/// Settings of the Lie group part (`docs/manifoldclr.md`; defaults are the paper's CIFAR-10 values
/// without a threshold).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifoldConfig {
    /// Generators M.
    pub num_operators: usize,
    /// Block size b: block-diagonal generators of b x b blocks (b must divide the features d).
    /// Not used by `manifold-directclr`, whose generators are dense `direct_dims` x
    /// `direct_dims` matrices on the first `direct_dims` features.
    pub block_size: usize,
    /// Width F of the encoder and prior networks.
    pub network_width: usize,
    /// KL weight beta.
    pub beta: f64,
    /// Weight lambda of L_m; unset: 10 with a projection head, 1 without (the paper).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f64>,
    /// Threshold zeta of the coefficient samples (0: plain Laplace).
    pub threshold: f64,
    /// Which threshold (`noise`, the default, or `sample`).
    pub threshold_variant: ThresholdVariant,
    /// Best-of-J samples in training (1: one sample).
    pub samples: usize,
    /// Iteration from which best-of-J applies.
    pub best_of_j_from: u64,
    /// Warm-up of the learned prior, iterations (5000 in the paper).
    pub prior_warmup: u64,
    /// How the warm-up blends the priors (`paper` or `public-code`).
    pub warmup_blend: WarmupBlend,
    /// Location of the fixed prior.
    pub shift_prior: f64,
    /// Scale of the fixed prior.
    pub scale_prior: f64,
    /// Weight of shift_l2 * mean_b sum_m mu_enc^2 (0: off).
    pub shift_l2: f64,
    /// Width of the identity part of the stable initialisation (alpha).
    pub init_alpha: f64,
    /// Width of the rotation part of the stable initialisation (beta of the paper's initialisation).
    pub init_beta: f64,
    /// Ablation S1: no stop-gradient on z1 in L_m.
    pub no_stop_grad_z1: bool,
    /// Ablation S2: no Lie group augmentation (InfoNCE on (z0, z1)).
    pub no_lie_augmentation: bool,
    /// Ablation S3: no manifold loss (lambda = 0).
    pub no_manifold_loss: bool,
    /// Ablation S4: the fixed prior, not the learned one, draws the augmentation.
    pub fixed_prior_augmentation: bool,
    /// Scale of L_m's gradient into the backbone, in [0, 1]: 1 is the paper's loss (L_m trains
    /// the backbone through z0, and through z1 with S1); 0 lets L_m train only the operators,
    /// encoder and prior, the backbone learning from InfoNCE on the moved features alone. The
    /// forward values, and so L_m, DI and every other logged figure, do not depend on it.
    /// The shipped Fashion-MNIST `manifoldclr-mlp` CPU config uses 0 (`docs/manifoldclr.md`,
    /// "The collapse").
    pub backbone_grad: f64,
}

impl Default for ManifoldConfig {
    fn default() -> Self {
        Self {
            num_operators: 16,
            block_size: 64,
            network_width: 512,
            beta: 1e-5,
            lambda: None,
            threshold: 0.0,
            threshold_variant: ThresholdVariant::Noise,
            samples: 1,
            best_of_j_from: 0,
            prior_warmup: 5000,
            warmup_blend: WarmupBlend::Paper,
            shift_prior: 0.05,
            scale_prior: 0.01,
            shift_l2: 0.0,
            init_alpha: 1e-4,
            init_beta: 6.0,
            no_stop_grad_z1: false,
            no_lie_augmentation: false,
            no_manifold_loss: false,
            fixed_prior_augmentation: false,
            backbone_grad: 1.0,
        }
    }
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above. Implemented by hand:
/// Burn's derive drops the field attributes (`#[serde(default)]`, `skip_serializing_if`) that
/// let a TOML run config leave settings out.
impl burn::config::Config for ManifoldConfig {}

impl ManifoldConfig {
    /// The VLGO model's settings for features of `dim` (block-diagonal) or for a direct
    /// dictionary on `dim` features (`direct`), with operators drawn from `seed`.
    pub fn vlgo(&self, dim: usize, direct: bool, seed: u64) -> Result<VlgoConfig> {
        if self.samples == 0 {
            return Err(ClrError::invalid(
                "manifold.samples (J)",
                0,
                format!(
                    "at least 1 (the threshold {} picks among J samples)",
                    self.threshold
                ),
            ));
        }
        let form = if direct {
            OperatorForm::Dense
        } else {
            OperatorForm::BlockDiagonal(self.block_size)
        };
        let config = VlgoConfig::new(
            LieOperatorsConfig::new(self.num_operators, dim)
                .with_form(form)
                .with_init_alpha(self.init_alpha)
                .with_init_beta(self.init_beta)
                .with_seed(seed),
        )
        .with_width(self.network_width)
        .with_fixed_prior(FixedPrior {
            shift: self.shift_prior,
            scale: self.scale_prior,
        })
        .with_learned_prior(true)
        .with_threshold(Threshold::new(self.threshold, self.threshold_variant)?)
        .with_samples(self.samples)
        .with_beta(self.beta)
        .with_best_of_j_from(self.best_of_j_from)
        .with_prior_warmup(self.prior_warmup)
        .with_warmup_blend(self.warmup_blend)
        .with_detach_target(!self.no_stop_grad_z1);
        config.validate()?;
        for (name, v) in [
            ("manifold.lambda", self.lambda.unwrap_or(1.0)),
            ("manifold.shift_l2", self.shift_l2),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(ClrError::invalid(name, v, "finite and >= 0"));
            }
        }
        if !(0.0..=1.0).contains(&self.backbone_grad) {
            return Err(ClrError::invalid(
                "manifold.backbone_grad",
                self.backbone_grad,
                "in [0, 1] (1: the paper's loss; 0: no gradient of L_m into the backbone)",
            ));
        }
        Ok(config)
    }

    /// Checks every setting for features of `dim` (block-diagonal, or a direct dictionary on
    /// `dim` features with `direct`); [`ContrastiveConfig::validate`](crate::ContrastiveConfig::validate)
    /// calls it with the backbone's features.
    ///
    /// ```
    /// use manifoldclr::ManifoldConfig;
    /// let config = ManifoldConfig { block_size: 48, ..Default::default() };
    /// assert!(config.validate(512, false).is_err()); // 48 does not divide 512
    /// assert!(ManifoldConfig::default().validate(512, false).is_ok());
    /// ```
    pub fn validate(&self, dim: usize, direct: bool) -> Result<()> {
        self.vlgo(dim, direct, 0).map(|_| ())
    }

    /// lambda: 0 with ablation S3, else the configured one or the default for the head.
    pub fn lambda(&self, with_head: bool) -> f64 {
        match (self.no_manifold_loss, self.lambda) {
            (true, _) => 0.0,
            (false, Some(l)) => l,
            (false, None) if with_head => 10.0,
            (false, None) => 1.0,
        }
    }
}

/// The manifold terms and diagnostics of one step.
#[derive(Debug, Clone)]
pub struct ManifoldStep<B: Backend> {
    /// L_m, shape `[1]`.
    pub loss_manifold: Tensor<B, 1>,
    /// KL(q || prior), shape `[1]`.
    pub kl: Tensor<B, 1>,
    /// lambda L_m + beta KL (+ the shift penalty), shape `[1]`.
    pub loss: Tensor<B, 1>,
    /// The step's distance improvement and diagnostics, still on the device (no gradient):
    /// [`ManifoldStep::read_figures`] reads them; a training step reads them with its loss and
    /// decodes them with [`ManifoldFigures::decode`].
    pub figures: Tensor<B, 1>,
}

impl<B: Backend> ManifoldStep<B> {
    /// The distance improvement and diagnostics, read back in one transfer.
    pub fn read_figures(&self) -> Result<ManifoldFigures> {
        ManifoldFigures::decode(&read_floats(self.figures.clone(), "step figures")?)
    }
}

/// Reads a tensor back as f32s; `what` names it in the error.
pub(crate) fn read_floats<B: Backend, const D: usize>(
    t: Tensor<B, D>,
    what: &'static str,
) -> Result<Vec<f32>> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| ClrError::invalid(what, format!("{e:?}"), "readable floats"))
}

/// A step's distance improvement and diagnostics, read back (see [`ManifoldStep::figures`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifoldFigures {
    /// Distance improvement of the encoder's sample (< 1: the operators move z0 toward z1).
    pub distance_improvement: f64,
    /// The step's coefficient and operator figures.
    pub diagnostics: ManifoldDiagnostics,
}

/// Entries of [`ManifoldStep::figures`] before the generator norms: the distance improvement,
/// the samples, the non-zero count, sum |c|, the generators used, and [min, max] of the
/// encoder's log-scales and locations and of the prior's.
const FIGURES_HEAD: usize = 13;

impl ManifoldFigures {
    /// Entries of the figures of a dictionary of `generators` operators.
    pub fn len(generators: usize) -> usize {
        FIGURES_HEAD + generators
    }

    /// The figures from the values of [`ManifoldStep::figures`].
    pub fn decode(values: &[f32]) -> Result<Self> {
        if values.len() < FIGURES_HEAD {
            return Err(ClrError::invalid(
                "step figures",
                format!("{} values", values.len()),
                format!("at least {FIGURES_HEAD}"),
            ));
        }
        let v = |i: usize| f64::from(values[i]);
        let (samples, nonzero) = (v(1).max(1.0), v(2));
        let pair = |i: usize, f: fn(f64) -> f64| [f(v(i)), f(v(i + 1))];
        let id = |x: f64| x;
        Ok(Self {
            distance_improvement: v(0),
            diagnostics: ManifoldDiagnostics {
                nonzero_per_sample: nonzero / samples,
                mean_abs_coefficient: if nonzero > 0.0 { v(3) / nonzero } else { 0.0 },
                generators_used: v(4) as usize,
                generator_norms: values[FIGURES_HEAD..]
                    .iter()
                    .map(|&x| f64::from(x))
                    .collect(),
                encoder_scale_range: pair(5, f64::exp),
                encoder_loc_range: pair(7, id),
                prior_scale_range: pair(9, f64::exp),
                prior_loc_range: pair(11, id),
            },
        })
    }
}

/// What a step's coefficients and operators look like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifoldDiagnostics {
    /// Mean count of non-zero coefficients per sample (encoder samples).
    pub nonzero_per_sample: f64,
    /// Mean |c| over the non-zero coefficients (0 when there is none).
    pub mean_abs_coefficient: f64,
    /// Generators with a non-zero coefficient in at least one of the step's encoder samples.
    pub generators_used: usize,
    /// ||Psi_m||_F per generator.
    pub generator_norms: Vec<f64>,
    /// [min, max] of the encoder's scales s.
    pub encoder_scale_range: [f64; 2],
    /// [min, max] of the encoder's locations mu.
    pub encoder_loc_range: [f64; 2],
    /// [min, max] of the prior's scales (the prior of this iteration, warm-up included).
    pub prior_scale_range: [f64; 2],
    /// [min, max] of the prior's locations.
    pub prior_loc_range: [f64; 2],
}

/// The figures of [`ManifoldStep::figures`], computed on the device from the distance
/// improvement, the encoder's samples `coefficients` ([N, M]), the encoder's and prior's
/// parameters and the generators' norms.
fn figures<B: Backend>(
    distance_improvement: Tensor<B, 1>,
    coefficients: Tensor<B, 2>,
    posterior: &LaplaceParams<B>,
    prior: &LaplaceParams<B>,
    norms: Tensor<B, 1>,
) -> Tensor<B, 1> {
    let device = coefficients.device();
    let samples = coefficients.dims()[0];
    let c = coefficients.detach();
    let nonzero = c.clone().not_equal_elem(0.0).float();
    let used = nonzero.clone().sum_dim(0).greater_elem(0.0).float().sum();
    let range = |t: &Tensor<B, 2>| {
        let flat = t.clone().detach().flatten::<1>(0, 1);
        [flat.clone().min(), flat.max()]
    };
    let mut parts = vec![
        distance_improvement.detach(),
        Tensor::from_floats([samples as f32], &device),
        nonzero.sum(),
        c.abs().sum(),
        used,
    ];
    for t in [
        &posterior.log_scale,
        &posterior.loc,
        &prior.log_scale,
        &prior.loc,
    ] {
        parts.extend(range(t));
    }
    parts.push(norms.detach());
    Tensor::cat(parts, 0)
}

/// The VLGO step on (z0, z1) at `iteration`: z0 moved by a prior sample (the anchor of the
/// contrast; none with ablation S2) and the terms to add to InfoNCE.
pub(crate) fn manifold_step<B: ExpmBackend>(
    vlgo: &Vlgo<B>,
    config: &ManifoldConfig,
    lambda: f64,
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    iteration: u64,
    streams: NoiseStreams,
) -> Result<(Option<Tensor<B, 2>>, ManifoldStep<B>)> {
    // L_m's way into the backbone, scaled: same values, gradient times backbone_grad.
    let g = config.backbone_grad;
    let scaled = |z: &Tensor<B, 2>| {
        if g == 1.0 {
            z.clone()
        } else if g == 0.0 {
            z.clone().detach()
        } else {
            z.clone().detach() + (z.clone() - z.clone().detach()) * g
        }
    };
    let step = vlgo.try_step(scaled(&z0), scaled(&z1), &streams, iteration)?;
    let di = try_distance_improvement_tensor(z0.clone(), z1, step.transported.clone().detach())?;
    // The learned prior of this iteration, which the KL targets, also draws the augmentation
    // (unless S2 or S4): one prior pass serves both.
    let prior = step.prior.clone();
    let figures = figures(
        di,
        step.coefficients.clone(),
        &step.posterior,
        &prior,
        vlgo.operators.generator_norms(),
    );
    let n = z0.dims()[0].max(1) as f64;
    let mut loss = step.manifold_loss.clone() * lambda + step.kl.clone() * vlgo.beta;
    if config.shift_l2 > 0.0 {
        let mu = step.posterior.loc.clone();
        let penalty = mu.square().sum().div_scalar(n);
        loss = loss + penalty * config.shift_l2;
    }
    let anchor = if config.no_lie_augmentation {
        None
    } else {
        let prior = if config.fixed_prior_augmentation {
            vlgo.try_fixed_params(&z0)?
        } else {
            prior
        };
        let [rows, m] = prior.dims();
        let u = streams.uniform_centered(iteration, AUGMENT_STREAM, rows * m);
        let u = Tensor::<B, 1>::from_floats(u.as_slice(), &z0.device()).reshape([rows, m]);
        let c = sample(&prior, u, &vlgo.threshold);
        Some(vlgo.try_transport(c, z0)?)
    };
    Ok((
        anchor,
        ManifoldStep {
            loss_manifold: step.manifold_loss,
            kl: step.kl,
            loss,
            figures,
        },
    ))
}

/// ManifoldMixupCLR's anchor: z0~ = l z0 + (1 - l) z1 with one l ~ U(0, 1) per sample (not per
/// feature), drawn from the stream of `iteration`.
pub(crate) fn mixup<B: Backend>(
    z0: Tensor<B, 2>,
    z1: Tensor<B, 2>,
    iteration: u64,
    streams: NoiseStreams,
) -> Tensor<B, 2> {
    let n = z0.dims()[0];
    let l: Vec<f32> = streams
        .uniform_centered(iteration, MIXUP_STREAM, n)
        .into_iter()
        .map(|u| u + 0.5)
        .collect();
    let l = Tensor::<B, 1>::from_floats(l.as_slice(), &z0.device()).reshape([n, 1]);
    z0 * l.clone() + z1 * (l.neg() + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vlgo_core::testing::TestBackend as B;

    #[test]
    fn figures_read_each_part_from_its_place() {
        let device = Default::default();
        let t = |rows: [[f32; 4]; 2]| Tensor::<B, 2>::from_floats(rows, &device);
        // Generator 1 is never used; |c| of the non-zeros: 1, 2, 3, 4, 5, 6.
        let c = t([[1.0, 0.0, -2.0, 3.0], [0.0, 0.0, 4.0, -5.0]]);
        let c = Tensor::cat(vec![c, t([[6.0, 0.0, 0.0, 0.0], [0.0; 4]])], 0);
        let params = |loc: f32, log_s: f32| {
            let rows = |v: f32| {
                let row = [v, v + 0.5, v - 0.5, v];
                Tensor::cat(vec![t([row, row]), t([row, row])], 0)
            };
            LaplaceParams::new(rows(loc), rows(log_s)).unwrap()
        };
        let norms = Tensor::<B, 1>::from_floats([1.0, 2.0, 3.0, 4.0], &device);
        let di = Tensor::<B, 1>::from_floats([0.75], &device);
        let values = figures(di, c, &params(0.1, -1.0), &params(-2.0, 0.0), norms);
        assert_eq!(values.dims(), [ManifoldFigures::len(4)]);
        let figures = ManifoldFigures::decode(&read_floats(values, "figures").unwrap()).unwrap();
        assert_eq!(figures.distance_improvement, 0.75);
        assert!(ManifoldFigures::decode(&[0.0; FIGURES_HEAD - 1]).is_err());
        let d = figures.diagnostics;
        assert_eq!(d.generators_used, 3);
        assert_eq!(d.nonzero_per_sample, 6.0 / 4.0);
        assert!((d.mean_abs_coefficient - 3.5).abs() < 1e-9);
        assert_eq!(d.generator_norms, vec![1.0, 2.0, 3.0, 4.0]);
        let close =
            |a: [f64; 2], b: [f64; 2]| (a[0] - b[0]).abs() < 1e-6 && (a[1] - b[1]).abs() < 1e-6;
        assert!(
            close(d.encoder_loc_range, [-0.4, 0.6]),
            "{:?}",
            d.encoder_loc_range
        );
        assert!(close(
            d.encoder_scale_range,
            [(-1.5f64).exp(), (-0.5f64).exp()]
        ));
        assert!(
            close(d.prior_loc_range, [-2.5, -1.5]),
            "{:?}",
            d.prior_loc_range
        );
        assert!(close(d.prior_scale_range, [(-0.5f64).exp(), 0.5f64.exp()]));
    }

    #[test]
    fn mixup_mixes_each_sample_with_one_weight() {
        let device = Default::default();
        let z0 = Tensor::<B, 2>::random([8, 5], burn::tensor::Distribution::Default, &device);
        let z1 = Tensor::<B, 2>::random([8, 5], burn::tensor::Distribution::Default, &device) + 2.0;
        let anchor = mixup(z0.clone(), z1.clone(), 3, NoiseStreams::new(1));
        // anchor - z1 = l (z0 - z1): one l per row, in [0, 1], not the same for every row.
        let ratio = ((anchor - z1.clone()) / (z0 - z1))
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let mut weights = Vec::new();
        for row in ratio.chunks(5) {
            assert!(row.iter().all(|l| (l - row[0]).abs() < 1e-4), "{row:?}");
            assert!((0.0..=1.0).contains(&row[0]));
            weights.push(row[0]);
        }
        assert!(
            weights.iter().any(|l| (l - weights[0]).abs() > 1e-3),
            "{weights:?}"
        );
        // Keyed by the iteration.
        let again = mixup(
            Tensor::<B, 2>::zeros([8, 5], &device),
            Tensor::ones([8, 5], &device),
            4,
            NoiseStreams::new(1),
        );
        let other: Vec<f32> = again.into_data().to_vec::<f32>().unwrap();
        assert!(
            other
                .chunks(5)
                .zip(&weights)
                .any(|(r, l)| (1.0 - r[0] - l).abs() > 1e-3)
        );
    }
}
