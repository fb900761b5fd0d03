//! Training one method on the swiss roll: FISTA with operator steps, or the variational model.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use vlgo_core::{
    ExpmBackend, FistaConfig, LieOperators, LieOperatorsConfig, NoiseStreams, OperatorInit,
    Threshold, fista,
};
use vlgo_datasets::NeighbourPairs;
use vlgo_nn::{InputNorm, VlgoConfig};

use super::config::{Method, SwissRollConfig};
use crate::error::{CliError, Result};

/// Figures of one epoch (means over its batches).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochMetrics {
    /// Epoch, from 1.
    pub epoch: usize,
    /// Mean over pairs of ||x' - T(c) x||^2 (summed over the 3 coordinates).
    pub mse: f64,
    /// Mean over pairs of sum_m |c_m| of the coefficients used for transport.
    pub l1: f64,
    /// Fraction of exact zeros among the coefficients used for transport (FISTA's shrinkage,
    /// or the thresholded sample, gives them; a plain Laplace sample almost never).
    pub zero_fraction: f64,
    /// Mean KL(q || prior) (variational methods).
    pub kl: Option<f64>,
    /// Mean FISTA iterations per batch (FISTA).
    pub fista_iterations: Option<f64>,
    /// Training time so far, seconds (diagnostics excluded).
    pub seconds: f64,
    /// Per operator, the posterior's mean scale (variational methods).
    pub posterior_scale: Option<Vec<f64>>,
    /// Mean over pairs of ||x' - T(mu) x||^2 at the encoder's location mu, no sampling
    /// (variational methods; `mse` is the selected sample's).
    pub mse_at_location: Option<f64>,
    /// The amortisation gap on the epoch's last batch (variational methods, every
    /// `gap_every` epochs).
    pub gap: Option<AmortisationGap>,
}

/// FISTA's objective ||x1 - T(c) x0||^2 + l1 ||c||_1 (means over a batch) at the encoder's
/// location and at FISTA's solution with the same operators: how far amortised inference is from
/// exact inference, measured directly rather than across differently trained models.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AmortisationGap {
    /// Squared error at the encoder's location.
    pub location_mse: f64,
    /// sum_m |mu_m| at the encoder's location.
    pub location_l1: f64,
    /// Squared error at FISTA's solution.
    pub fista_mse: f64,
    /// sum_m |c_m| at FISTA's solution.
    pub fista_l1: f64,
    /// FISTA's iterations.
    pub fista_iterations: usize,
    /// The objective at the location minus the objective at FISTA's solution: 0 when the
    /// location is FISTA's solution, usually > 0; it can be negative, since the objective is not
    /// convex in c and FISTA from c = 0 may stop in a worse local minimum than the location.
    pub objective_gap: f64,
}

/// [`AmortisationGap`] of `location` [N, M] on the batch (x0, x1) under `operators`.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use vlgo::swiss_roll::amortisation_gap;
/// use vlgo_core::{FistaConfig, LieOperatorsConfig, OperatorInit, fista};
///
/// let device = Default::default();
/// let ops = LieOperatorsConfig::new(2, 3)
///     .with_init(OperatorInit::Normal { std: 0.3 })
///     .with_seed(1)
///     .init::<NdArray>(&device)
///     .unwrap();
/// let x0 = Tensor::<NdArray, 2>::from_floats([[1.0, 0.5, -0.2], [0.3, -1.0, 0.8]], &device);
/// let c = Tensor::<NdArray, 2>::from_floats([[0.8, 0.0], [0.0, -0.6]], &device);
/// let x1 = ops.transport(c, x0.clone());
/// let settings = FistaConfig::new().with_l1(0.01);
/// let exact = fista(&ops, x0.clone(), x1.clone(), &settings).unwrap().coefficients;
/// let gap = amortisation_gap(&ops, x0.clone(), x1.clone(), exact, &settings).unwrap();
/// assert_eq!(gap.objective_gap, 0.0);
/// let zero = Tensor::zeros([2, 2], &device);
/// assert!(amortisation_gap(&ops, x0, x1, zero, &settings).unwrap().objective_gap > 0.0);
/// ```
pub fn amortisation_gap<B: ExpmBackend>(
    operators: &LieOperators<B>,
    x0: Tensor<B, 2>,
    x1: Tensor<B, 2>,
    location: Tensor<B, 2>,
    settings: &FistaConfig,
) -> Result<AmortisationGap> {
    let solution = fista(operators, x0.clone(), x1.clone(), settings)?;
    let terms = |c: Tensor<B, 2>| -> Result<(f64, f64)> {
        let mse = reconstruction(operators.try_transport(c.clone(), x0.clone())?, x1.clone());
        Ok((scalar(mse), scalar(c.abs().sum_dim(1).mean())))
    };
    let (location_mse, location_l1) = terms(location)?;
    let (fista_mse, fista_l1) = terms(solution.coefficients)?;
    let objective = |mse: f64, l1: f64| mse + settings.l1 * l1;
    Ok(AmortisationGap {
        location_mse,
        location_l1,
        fista_mse,
        fista_l1,
        fista_iterations: solution.iterations,
        objective_gap: objective(location_mse, location_l1) - objective(fista_mse, fista_l1),
    })
}

/// A trained method.
#[derive(Debug, Clone)]
pub struct MethodRun {
    /// Which method.
    pub method: Method,
    /// Per-epoch figures.
    pub epochs: Vec<EpochMetrics>,
    /// The learned generators, row-major [M, 3, 3].
    pub psi: Vec<f32>,
    /// ||Psi_m||_F.
    pub operator_norms: Vec<f64>,
}

impl MethodRun {
    /// Training seconds in all.
    pub fn train_seconds(&self) -> f64 {
        self.epochs.last().map_or(0.0, |e| e.seconds)
    }

    /// Generators whose F-norm exceeds 5% of the largest.
    pub fn nonzero_operators(&self) -> usize {
        let largest = self.operator_norms.iter().cloned().fold(0.0, f64::max);
        self.operator_norms
            .iter()
            .filter(|&&n| n > 0.05 * largest)
            .count()
    }

    /// Mean FISTA iterations per batch over the whole run (FISTA only).
    pub fn mean_fista_iterations(&self) -> Option<f64> {
        let its: Vec<f64> = self
            .epochs
            .iter()
            .filter_map(|e| e.fista_iterations)
            .collect();
        (!its.is_empty()).then(|| its.iter().sum::<f64>() / its.len() as f64)
    }
}

/// Running sums of one epoch.
#[derive(Default)]
struct Accumulator {
    batches: usize,
    mse: f64,
    l1: f64,
    zeros: f64,
    kl: f64,
    iterations: f64,
    scale: Vec<f64>,
    mse_at_location: f64,
    gap: Option<AmortisationGap>,
    diagnostic_seconds: f64,
}

/// Trains `method` on the pairs of `points`; `on_epoch` sees every epoch's figures as they come
/// (for the progress bar and `metrics.jsonl`).
pub fn train_method<B>(
    config: &SwissRollConfig,
    method: Method,
    points: &[[f32; 3]],
    pairs: &NeighbourPairs,
    device: &B::Device,
    mut on_epoch: impl FnMut(&EpochMetrics) -> Result<()>,
) -> Result<MethodRun>
where
    B: AutodiffBackend + ExpmBackend,
    B::InnerBackend: ExpmBackend,
{
    let flat: Vec<f32> = points.iter().flatten().copied().collect();
    let all = Tensor::<B, 1>::from_floats(flat.as_slice(), device).reshape([points.len(), 3]);
    let operators_config = LieOperatorsConfig::new(config.num_operators, 3)
        .with_init(OperatorInit::Normal {
            std: config.init_std,
        })
        .with_seed(config.seed);
    // The encoder's layers draw from the backend's generator: seed it so a run repeats.
    B::seed(device, config.seed);
    let operators = operators_config.init::<B>(device)?;
    let adam = || AdamConfig::new().with_epsilon(1e-8);
    let fista_settings = FistaConfig::new()
        .with_l1(config.l1_weight)
        .with_tolerance(config.fista_tolerance)
        .with_max_iterations(config.fista_max_iterations)
        .with_threads(match config.fista_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        });
    let mut trainer = match method {
        Method::Fista => Trainer::Fista {
            operators,
            optim: adam().init(),
            fista: fista_settings.clone(),
        },
        Method::Vlgo {
            thresholded,
            samples,
        } => {
            let zeta = if thresholded { config.zeta } else { 0.0 };
            let input_norm = match config.standardise_encoder_input {
                true => Some(InputNorm::of_rows(&flat, 3)?),
                false => None,
            };
            let mut model = VlgoConfig::new(operators_config)
                .with_width(config.encoder_width)
                .with_fixed_prior(config.prior)
                .with_encoder_input_norm(input_norm)
                .with_threshold(Threshold::new(zeta, config.threshold_variant)?)
                .with_samples(samples)
                .with_beta(config.beta)
                .init::<B>(device)?;
            // Every method starts from the same operators.
            model.operators = operators;
            Trainer::Vlgo {
                model,
                optim_operators: adam().init(),
                optim_encoder: adam().init(),
                streams: NoiseStreams::new(config.seed ^ 0x7a11),
            }
        }
    };

    let mut epochs = Vec::with_capacity(config.epochs);
    let mut seconds = 0.0;
    let mut step = 0u64;
    let total_steps = (config.epochs * config.points.div_ceil(config.batch_size)) as u64;
    let variational = matches!(method, Method::Vlgo { .. });
    for epoch in 0..config.epochs {
        let mut acc = Accumulator::default();
        let batches = pairs.epoch(config.seed, epoch as u64, config.batch_size);
        let gap_epoch = config.gap_every > 0 && (epoch + 1) % config.gap_every == 0;
        for (b, batch) in batches.iter().enumerate() {
            let (anchors, partners): (Vec<i32>, Vec<i32>) =
                batch.iter().map(|&(a, p)| (a as i32, p as i32)).unzip();
            let pick = |idx: &[i32]| {
                all.clone()
                    .select(0, Tensor::<B, 1, Int>::from_ints(idx, device))
            };
            let (x0, x1) = (pick(&anchors), pick(&partners));
            if let (true, true, Trainer::Vlgo { model, .. }) =
                (gap_epoch, b + 1 == batches.len(), &trainer)
            {
                // Before the step, so that location and FISTA see the same operators.
                let (x0, x1) = (x0.clone().inner(), x1.clone().inner());
                let location = model
                    .encoder
                    .valid()
                    .try_forward(x0.clone(), x1.clone())?
                    .loc;
                let operators = model.operators.valid();
                acc.gap = Some(amortisation_gap(
                    &operators,
                    x0,
                    x1,
                    location,
                    &fista_settings,
                )?);
            }
            let lr = config.lr_schedule.factor(step, total_steps);
            let start = Instant::now();
            trainer.step(config, lr, x0, x1, step, &mut acc)?;
            seconds += start.elapsed().as_secs_f64();
            step += 1;
        }
        seconds -= acc.diagnostic_seconds;
        let n = acc.batches as f64;
        let metrics = EpochMetrics {
            epoch: epoch + 1,
            mse: acc.mse / n,
            l1: acc.l1 / n,
            zero_fraction: acc.zeros / n,
            kl: variational.then(|| acc.kl / n),
            fista_iterations: matches!(method, Method::Fista).then(|| acc.iterations / n),
            seconds,
            posterior_scale: variational.then(|| acc.scale.iter().map(|s| s / n).collect()),
            mse_at_location: variational.then(|| acc.mse_at_location / n),
            gap: acc.gap,
        };
        if !metrics.mse.is_finite() {
            return Err(CliError::Diverged {
                method: method.to_string(),
                epoch: epoch + 1,
                what: "mse",
                value: metrics.mse,
            });
        }
        on_epoch(&metrics)?;
        epochs.push(metrics);
    }
    let operators = trainer.operators();
    let psi = operators
        .psi()
        .val()
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("float tensor converts to f32");
    let operator_norms = operators
        .generator_norms()
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float tensor converts to f64");
    Ok(MethodRun {
        method,
        epochs,
        psi,
        operator_norms,
    })
}

type Adam<M, B> = burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, M, B>;

// One trainer lives per method run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Trainer<B: AutodiffBackend + ExpmBackend> {
    Fista {
        operators: LieOperators<B>,
        optim: Adam<LieOperators<B>, B>,
        fista: FistaConfig,
    },
    Vlgo {
        model: vlgo_nn::Vlgo<B>,
        optim_operators: Adam<vlgo_nn::Vlgo<B>, B>,
        optim_encoder: Adam<vlgo_nn::Vlgo<B>, B>,
        streams: NoiseStreams,
    },
}

/// Mean over the batch of the per-pair squared error summed over coordinates.
fn reconstruction<B: Backend>(moved: Tensor<B, 2>, target: Tensor<B, 2>) -> Tensor<B, 1> {
    (moved - target).square().sum_dim(1).mean()
}

/// Fraction of entries of `c` that are exactly 0.
fn zero_fraction<B: Backend>(c: Tensor<B, 2>) -> f64 {
    scalar(c.equal_elem(0.0).float().mean())
}

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().to_f64()
}

impl<B> Trainer<B>
where
    B: AutodiffBackend + ExpmBackend,
    B::InnerBackend: ExpmBackend,
{
    /// One training step at `lr_factor` times the configured learning rates.
    fn step(
        &mut self,
        config: &SwissRollConfig,
        lr_factor: f64,
        x0: Tensor<B, 2>,
        x1: Tensor<B, 2>,
        step: u64,
        acc: &mut Accumulator,
    ) -> Result<()> {
        let (lr_ops, lr_enc, fw) = (
            config.operator_lr * lr_factor,
            config.encoder_lr * lr_factor,
            config.frobenius_weight,
        );
        match self {
            Trainer::Fista {
                operators,
                optim,
                fista: settings,
            } => {
                let solution = fista(
                    &operators.valid(),
                    x0.clone().inner(),
                    x1.clone().inner(),
                    settings,
                )?;
                let c = Tensor::<B, 2>::from_inner(solution.coefficients);
                let mse = reconstruction(operators.try_transport(c.clone(), x0)?, x1);
                let loss = mse.clone() + operators.frobenius_penalty() * fw;
                let grads = GradientsParams::from_grads(loss.backward(), &*operators);
                *operators = optim.step(lr_ops, operators.clone(), grads);
                acc.mse += scalar(mse);
                acc.zeros += zero_fraction(c.clone().inner());
                acc.l1 += scalar(c.abs().sum_dim(1).mean());
                acc.iterations += solution.iterations as f64;
            }
            Trainer::Vlgo {
                model,
                optim_operators,
                optim_encoder,
                streams,
            } => {
                let out = model.try_step(x0.clone(), x1.clone(), streams, step)?;
                // Diagnostics outside the graph (and outside the timing): the squared error at
                // the location, and the posterior's scale per operator. On the CPU backends the
                // step has run by now; an asynchronous backend would need a sync first.
                let diagnostics = Instant::now();
                let location = out.posterior.loc.clone().inner();
                let at_location = model
                    .operators
                    .valid()
                    .try_transport(location, x0.inner())?;
                acc.mse_at_location += scalar(reconstruction(at_location, x1.inner()));
                let scale = out.posterior.scale().inner().mean_dim(0);
                let scale: Vec<f64> = scale
                    .into_data()
                    .convert::<f64>()
                    .to_vec::<f64>()
                    .unwrap_or_else(|e| unreachable!("a float tensor converts to f64: {e:?}"));
                acc.scale.resize(scale.len(), 0.0);
                for (a, s) in acc.scale.iter_mut().zip(scale) {
                    *a += s;
                }
                acc.zeros += zero_fraction(out.coefficients.clone().inner());
                acc.diagnostic_seconds += diagnostics.elapsed().as_secs_f64();
                // The step's L_m is a mean over the 3 coordinates; the objective sums them.
                let mse = out.manifold_loss * 3.0;
                let loss = mse.clone()
                    + out.kl.clone() * model.beta
                    + model.operators.frobenius_penalty() * fw;
                let mut grads = loss.backward();
                let g_ops = GradientsParams::from_module(&mut grads, &model.operators);
                let g_enc = GradientsParams::from_module(&mut grads, &model.encoder);
                *model = optim_operators.step(lr_ops, model.clone(), g_ops);
                *model = optim_encoder.step(lr_enc, model.clone(), g_enc);
                acc.mse += scalar(mse);
                acc.l1 += scalar(out.coefficients.abs().sum_dim(1).mean());
                acc.kl += scalar(out.kl);
            }
        }
        acc.batches += 1;
        Ok(())
    }

    fn operators(&self) -> LieOperators<B::InnerBackend> {
        match self {
            Trainer::Fista { operators, .. } => operators.valid(),
            Trainer::Vlgo { model, .. } => model.operators.valid(),
        }
    }
}
