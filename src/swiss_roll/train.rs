//! Training one method on the swiss roll: FISTA with operator steps, or the variational model.

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use vlgo_core::{
    ExpmBackend, FistaConfig, LieOperators, LieOperatorsConfig, NoiseStreams, OperatorInit,
    Threshold, ThresholdVariant, fista,
};
use vlgo_datasets::NeighbourPairs;
use vlgo_nn::VlgoConfig;

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
    /// Mean KL(q || prior) (variational methods).
    pub kl: Option<f64>,
    /// Mean FISTA iterations per batch (FISTA).
    pub fista_iterations: Option<f64>,
    /// Training time so far, seconds.
    pub seconds: f64,
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
    kl: f64,
    iterations: f64,
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
    let mut trainer = match method {
        Method::Fista => Trainer::Fista {
            operators,
            optim: adam().init(),
            fista: FistaConfig::new()
                .with_l1(config.l1_weight)
                .with_tolerance(config.fista_tolerance)
                .with_max_iterations(config.fista_max_iterations)
                .with_threads(match config.fista_threads {
                    0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                    n => n,
                }),
        },
        Method::Vlgo {
            thresholded,
            samples,
        } => {
            let zeta = if thresholded { config.zeta } else { 0.0 };
            let mut model = VlgoConfig::new(operators_config)
                .with_width(config.encoder_width)
                .with_fixed_prior(config.prior)
                .with_threshold(Threshold::new(zeta, ThresholdVariant::Noise)?)
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
    for epoch in 0..config.epochs {
        let mut acc = Accumulator::default();
        for batch in pairs.epoch(config.seed, epoch as u64, config.batch_size) {
            let (anchors, partners): (Vec<i32>, Vec<i32>) =
                batch.iter().map(|&(a, p)| (a as i32, p as i32)).unzip();
            let pick = |idx: &[i32]| {
                all.clone()
                    .select(0, Tensor::<B, 1, Int>::from_ints(idx, device))
            };
            let (x0, x1) = (pick(&anchors), pick(&partners));
            let start = Instant::now();
            trainer.step(config, x0, x1, step, &mut acc)?;
            seconds += start.elapsed().as_secs_f64();
            step += 1;
        }
        let n = acc.batches as f64;
        let metrics = EpochMetrics {
            epoch: epoch + 1,
            mse: acc.mse / n,
            l1: acc.l1 / n,
            kl: matches!(method, Method::Vlgo { .. }).then(|| acc.kl / n),
            fista_iterations: matches!(method, Method::Fista).then(|| acc.iterations / n),
            seconds,
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
        .psi
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

fn scalar<B: Backend>(t: Tensor<B, 1>) -> f64 {
    t.into_scalar().to_f64()
}

impl<B> Trainer<B>
where
    B: AutodiffBackend + ExpmBackend,
    B::InnerBackend: ExpmBackend,
{
    fn step(
        &mut self,
        config: &SwissRollConfig,
        x0: Tensor<B, 2>,
        x1: Tensor<B, 2>,
        step: u64,
        acc: &mut Accumulator,
    ) -> Result<()> {
        let (lr_ops, lr_enc, fw) = (
            config.operator_lr,
            config.encoder_lr,
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
                let mse = reconstruction(operators.transport(c.clone(), x0)?, x1);
                let loss = mse.clone() + operators.frobenius_penalty() * fw;
                let grads = GradientsParams::from_grads(loss.backward(), &*operators);
                *operators = optim.step(lr_ops, operators.clone(), grads);
                acc.mse += scalar(mse);
                acc.l1 += scalar(c.abs().sum_dim(1).mean());
                acc.iterations += solution.iterations as f64;
            }
            Trainer::Vlgo {
                model,
                optim_operators,
                optim_encoder,
                streams,
            } => {
                let out = model.step(x0, x1, streams, step)?;
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
