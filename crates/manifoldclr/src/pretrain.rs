//! The pre-training loop: AdamW per parameter group (own learning rate, weight decay, minimum
//! learning rate and global-norm clipping), warm-up then per-iteration cosine, index-ordered
//! batches of keyed augmentations, checkpoints at epoch ends and exact resume.
//!
//! The data comes through [`ViewSource`] (this crate knows nothing of files); what happens
//! around the loop (logging, the kNN monitor, progress) through [`PretrainHooks`].

use std::path::Path;
use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::record::{BinFileRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use vlgo_core::ExpmBackend;
use vlgo_core::StreamRng;
use vlgo_core::layers::LayerBackend;

use crate::clip::clip_global_norm;
use crate::error::{ClrError, Result};
use crate::eval::spectrum;
use crate::manifold::{ManifoldDiagnostics, ManifoldFigures, read_floats};
use crate::method::{ContrastiveConfig, ContrastiveModel, Exchange, OneDevice};
use crate::schedule::WarmupCosine;

/// Optimiser settings of one parameter group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GroupConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Decoupled weight decay (AdamW).
    pub weight_decay: f64,
    /// Learning rate at the end of the cosine.
    pub min_lr: f64,
    /// Global gradient-norm bound of the group (none: no clipping).
    pub clip: Option<f64>,
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above, implemented by hand: Burn's
/// derive drops the serde field attributes that let a TOML run config leave settings out.
impl burn::config::Config for GroupConfig {}

impl GroupConfig {
    /// The operators' group (the paper's appendix): lr 1e-3, weight decay 1e-3, clipping at 0.1.
    pub fn operators() -> Self {
        Self {
            lr: 1e-3,
            weight_decay: 1e-3,
            min_lr: 1e-5,
            clip: Some(0.1),
        }
    }

    /// The encoder and prior networks' group: lr 1e-4, weight decay 1e-5, clipping at 1.0
    /// (their gradients together).
    pub fn variational() -> Self {
        Self {
            lr: 1e-4,
            weight_decay: 1e-5,
            min_lr: 1e-5,
            clip: Some(1.0),
        }
    }
}

/// Settings of a pre-training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PretrainConfig {
    /// Backbone, head, method and loss.
    pub model: ContrastiveConfig,
    /// Passes over the training images.
    pub epochs: usize,
    /// Images per step (each gives two views); the last partial batch of an epoch is dropped.
    pub batch_size: usize,
    /// Warm-up epochs (linear, per iteration).
    pub warmup_epochs: usize,
    /// Seed of the initialisation, the shuffles and the augmentations.
    pub seed: u64,
    /// The backbone's group.
    pub backbone: GroupConfig,
    /// The head's group.
    pub head: GroupConfig,
    /// The operators' group (methods with operators).
    #[serde(default = "GroupConfig::operators")]
    pub operators: GroupConfig,
    /// The coefficient encoder's and learned prior's group (methods with operators).
    #[serde(default = "GroupConfig::variational")]
    pub variational: GroupConfig,
    /// Steps between two logs of the batch features' spectrum and norm (0: never). Each costs
    /// a d x d eigenvalue problem on the host: cheap at d = 128, a few tenths of a second at 512.
    #[serde(default = "default_spectrum_every")]
    pub spectrum_every: usize,
    /// Devices that share every batch (data parallelism: each holds `batch_size / devices`
    /// images of it; feature `distributed`). A run's results do not depend on it beyond the
    /// batch-norm statistics, which are each device's own; a checkpoint resumes with any
    /// number.
    #[serde(default = "default_devices")]
    pub devices: usize,
    /// Synchronised batch norm: in training every batch-norm layer normalises with the
    /// statistics of the global batch, summed over the devices (two exchanges per layer in
    /// each pass, forward and backward), so that a run on several devices is the one-device
    /// run up to rounding. On one device it computes the same statistics through the
    /// synchronised form's arithmetic (the reference of a run on several). Off by default:
    /// each device's own statistics, Burn's and the paper's.
    #[serde(default)]
    pub sync_batch_norm: bool,
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above, implemented by hand: Burn's
/// derive drops the serde field attributes that let a TOML run config leave settings out.
impl burn::config::Config for PretrainConfig {}

fn default_spectrum_every() -> usize {
    10
}

fn default_devices() -> usize {
    1
}

/// `devices` sharing batches of `batch_size`: a divisor that leaves each at least 2 images.
pub(crate) fn check_devices(devices: usize, batch_size: usize) -> Result<()> {
    if devices == 0 || !batch_size.is_multiple_of(devices) || batch_size / devices < 2 {
        return Err(ClrError::invalid(
            "devices",
            format!("{devices} for a batch of {batch_size}"),
            "a divisor of batch_size that leaves each device at least 2 images",
        ));
    }
    Ok(())
}

impl PretrainConfig {
    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        if self.epochs == 0 || self.batch_size < 2 {
            return Err(ClrError::invalid(
                "epochs / batch_size",
                format!("{} / {}", self.epochs, self.batch_size),
                "epochs >= 1 and batch_size >= 2",
            ));
        }
        for (name, g) in [
            ("backbone", self.backbone),
            ("head", self.head),
            ("operators", self.operators),
            ("variational", self.variational),
        ] {
            self.schedule(&g, 1).validate()?;
            if !(g.weight_decay >= 0.0 && g.weight_decay.is_finite()) {
                return Err(ClrError::invalid(name, g.weight_decay, "weight decay >= 0"));
            }
            if let Some(c) = g.clip
                && !(c > 0.0 && c.is_finite())
            {
                return Err(ClrError::invalid(name, c, "clip > 0"));
            }
        }
        check_devices(self.devices, self.batch_size)?;
        if self.devices > 1 && !cfg!(feature = "distributed") {
            return Err(ClrError::invalid(
                "devices",
                self.devices,
                "1: this build of manifoldclr lacks its `distributed` feature",
            ));
        }
        if self.warmup_epochs > self.epochs {
            return Err(ClrError::invalid(
                "warmup_epochs",
                self.warmup_epochs,
                format!("at most epochs ({})", self.epochs),
            ));
        }
        Ok(())
    }

    fn schedule(&self, g: &GroupConfig, steps_per_epoch: usize) -> WarmupCosine {
        WarmupCosine {
            base: g.lr,
            min: g.min_lr,
            warmup: self.warmup_epochs * steps_per_epoch,
            total: self.epochs * steps_per_epoch,
        }
    }
}

/// Training images as pairs of augmented views.
pub trait ViewSource: Sync {
    /// Number of images.
    fn len(&self) -> usize;
    /// Whether there is none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Shape of one view, [C, H, W].
    fn shape(&self) -> [usize; 3];
    /// Both views of the images `indices` in `epoch`, `[len, C, H, W]` floats each, a function of
    /// (seed, epoch, index) only.
    fn views(&self, indices: &[usize], epoch: usize) -> Result<[Vec<f32>; 2]>;
}

/// One optimisation step's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// Steps done, this one included.
    pub step: usize,
    /// 1-based epoch.
    pub epoch: usize,
    /// The InfoNCE loss.
    pub loss_nce: f64,
    /// The backbone's learning rate.
    pub lr: f64,
    /// Global gradient norm of the backbone before clipping.
    pub grad_norm: f64,
    /// Images (pairs of views) per second over the step, data included.
    pub images_per_second: f64,
    /// Seconds this device spent in the exchanges of data-parallel training since the last
    /// step's log, waits for the other devices included (one device: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange_seconds: Option<f64>,
    /// The batch features' norm and spectrum (the first step and every `spectrum_every`-th
    /// after it: steps 1, 11, 21, ... for 10).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub features: Option<FeatureLog>,
    /// The manifold figures of the step (methods with operators).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub manifold: Option<ManifoldLog>,
}

/// The backbone features of a step's batch (both views): size and spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FeatureLog {
    /// Mean Euclidean norm of a feature vector.
    pub feature_norm: f64,
    /// exp(feature_entropy): the effective rank of the batch's features.
    pub effective_rank: f64,
    /// Entropy of the normalised singular values (what the paper's Table 7 reports).
    pub feature_entropy: f64,
    /// ||Z||_F^2 / ||Z||_2^2.
    pub stable_rank: f64,
    /// The effective rank of the features less their batch mean: the spread's own dimension
    /// (the uncentred rank also falls when the spread merely shrinks toward a common mean).
    #[serde(default)]
    pub centred_effective_rank: f64,
    /// sqrt(mean_b ||z_b - mean z||^2) / ||mean z||: how far the features spread around their
    /// common mean, relative to its length.
    #[serde(default)]
    pub spread_ratio: f64,
    /// sqrt(mean_b ||z0_b - z1_b||^2 / 2) / sqrt(mean_b ||z_b - mean z||^2): the distance
    /// between an image's two views relative to the spread (1: views as far apart as two
    /// random images; 0: views identical).
    #[serde(default)]
    pub view_gap_ratio: f64,
}

impl FeatureLog {
    /// The figures of a [rows, dim] feature batch of both views: the B view-0 rows first, then
    /// the B view-1 rows (`view_gap_ratio` pairs row b with row B + b; 0 when rows is odd).
    pub fn of<B: Backend>(features: Tensor<B, 2>) -> Result<Self> {
        let [rows, dim] = features.dims();
        let values = read_floats(features, "features")?;
        // Collapsed features (all zero) have no spectrum: logged as ranks of 0, not an error
        // that would end the run.
        if values.iter().all(|v| *v == 0.0) {
            return Ok(Self {
                feature_norm: 0.0,
                effective_rank: 0.0,
                feature_entropy: 0.0,
                stable_rank: 0.0,
                centred_effective_rank: 0.0,
                spread_ratio: 0.0,
                view_gap_ratio: 0.0,
            });
        }
        let s = spectrum(&values, dim)?;
        // Squared length in f64, without a copy per row (this runs every logged step).
        let sq = |r: &[f32]| r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>();
        let norms: f64 = values.chunks_exact(dim).map(|r| sq(r).sqrt()).sum();
        let mut mean = vec![0.0f64; dim];
        for r in values.chunks_exact(dim) {
            mean.iter_mut()
                .zip(r)
                .for_each(|(m, &v)| *m += f64::from(v));
        }
        mean.iter_mut().for_each(|m| *m /= rows.max(1) as f64);
        let centred: Vec<f32> = values
            .chunks_exact(dim)
            .flat_map(|r| r.iter().zip(&mean).map(|(&v, m)| (f64::from(v) - m) as f32))
            .collect();
        let spread = centred.chunks_exact(dim).map(sq).sum::<f64>() / rows as f64;
        // All rows equal: no spread, and so no spectrum of it.
        let centred_rank = match spread > 0.0 {
            true => spectrum(&centred, dim)?.effective_rank,
            false => 0.0,
        };
        // Without a view-1 row for every view-0 row there are no pairs (logged as 0).
        let half = if rows % 2 == 0 { rows / 2 * dim } else { 0 };
        let gap = values[..half]
            .chunks_exact(dim)
            .zip(values[half..2 * half].chunks_exact(dim))
            .map(|(a, b)| {
                a.iter()
                    .zip(b)
                    .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / (rows / 2).max(1) as f64;
        let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
        Ok(Self {
            feature_norm: norms / rows.max(1) as f64,
            effective_rank: s.effective_rank,
            feature_entropy: s.entropy,
            stable_rank: s.stable_rank,
            centred_effective_rank: centred_rank,
            spread_ratio: ratio(
                spread.sqrt(),
                mean.iter().map(|m| m * m).sum::<f64>().sqrt(),
            ),
            view_gap_ratio: ratio((gap / 2.0).sqrt(), spread.sqrt()),
        })
    }
}

/// A step's manifold terms and diagnostics, as logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifoldLog {
    /// L_m.
    pub loss_manifold: f64,
    /// KL(q || prior).
    pub kl: f64,
    /// Distance improvement (< 1: the operators move z0 toward z1).
    pub distance_improvement: f64,
    /// Coefficients, generators, encoder and prior ranges.
    #[serde(flatten)]
    pub diagnostics: ManifoldDiagnostics,
    /// The operators' global gradient norm before clipping.
    pub operators_grad_norm: f64,
    /// The encoder's and prior's global gradient norm before clipping.
    pub variational_grad_norm: f64,
}

/// Backends that pre-train: every autodiff backend (`Autodiff<B>` over any Burn backend; the
/// bounds hold for all of them, since [`LayerBackend`] and [`ExpmBackend`] are implemented for
/// every backend, and name what the training calls; with the `distributed` feature, so is
/// [`Collective`], the exchange inside autodiff that synchronised batch norm needs).
pub trait TrainBackend:
    AutodiffBackend<InnerBackend: LayerBackend + ExpmBackend> + LayerBackend + ExpmBackend + Collective
{
}

impl<B> TrainBackend for B where
    B: AutodiffBackend<InnerBackend: LayerBackend + ExpmBackend>
        + LayerBackend
        + ExpmBackend
        + Collective
{
}

#[cfg(feature = "distributed")]
pub use crate::distributed::CollectiveBackend as Collective;

/// Without the `distributed` feature there is no exchange: every backend qualifies.
#[cfg(not(feature = "distributed"))]
pub trait Collective {}

#[cfg(not(feature = "distributed"))]
impl<B> Collective for B {}

/// What runs around the loop.
pub trait PretrainHooks<B: TrainBackend> {
    /// After every step.
    fn step(&mut self, log: &StepLog) -> Result<()>;
    /// After every epoch (1-based), once its checkpoint is written.
    fn epoch_end(&mut self, epoch: usize, model: &ContrastiveModel<B>) -> Result<()>;
}

type Adam<B> = OptimizerAdaptor<AdamW, ContrastiveModel<B>, B>;

/// The exchanges of a data-parallel step beside the rows InfoNCE gathers: implemented by the
/// collective engine's peers (feature `distributed`).
pub(crate) trait StepSync<B: TrainBackend>: Exchange<B> {
    /// A parameter group's gradients summed over the parts.
    fn sum_grads(&self, grads: GradientsParams) -> Result<GradientsParams>;
    /// The parts' mean of a vector of figures.
    fn mean(&self, figures: Tensor<B::InnerBackend, 1>) -> Result<Tensor<B::InnerBackend, 1>>;
    /// Whether every part reports `ok`.
    fn all_ok(&self, ok: bool) -> Result<bool>;
    /// Seconds spent in the exchanges since the last call.
    fn take_exchange_seconds(&self) -> f64;
}

/// `outcome`, once every part has said whether its own went well: an error on another part
/// becomes [`ClrError::PeerFailed`] here, so that all parts stop at the same place.
fn agree<B: TrainBackend, T>(sync: Option<&dyn StepSync<B>>, outcome: Result<T>) -> Result<T> {
    let Some(sync) = sync else {
        return outcome;
    };
    let all = sync.all_ok(outcome.is_ok())?;
    match outcome {
        Ok(_) if !all => Err(ClrError::PeerFailed),
        outcome => outcome,
    }
}

/// Batches whose views may be made ahead of the step that uses them: one is enough to hide
/// the augmentation behind the step, a second absorbs an uneven batch.
const PREFETCH: usize = 2;

/// Checkpoint files of the backbone's, head's, operators' and encoder and prior's optimisers.
const OPTIM_FILES: [&str; 4] = [
    "optim-backbone",
    "optim-head",
    "optim-operators",
    "optim-variational",
];

/// Where training stands, written with every checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Epochs completed.
    pub epochs_done: usize,
    /// Steps completed.
    pub steps_done: usize,
    /// Training seconds so far.
    pub train_seconds: f64,
}

/// The model, its optimisers and where training stands.
pub struct Pretrainer<B: TrainBackend> {
    /// The model being trained.
    pub model: ContrastiveModel<B>,
    opt_backbone: Adam<B>,
    opt_head: Adam<B>,
    opt_operators: Adam<B>,
    opt_variational: Adam<B>,
    /// Progress.
    pub state: TrainState,
    config: PretrainConfig,
}

fn adamw<B: TrainBackend>(g: &GroupConfig) -> Adam<B> {
    AdamWConfig::new()
        .with_beta_1(0.9)
        .with_beta_2(0.999)
        .with_epsilon(1e-8)
        .with_weight_decay(g.weight_decay as f32)
        .init()
}

impl<B: TrainBackend> Pretrainer<B> {
    /// A fresh run: the model initialised from the seed.
    ///
    /// The same seed gives the same weights whatever else the process runs, as long as what
    /// draws from the backend's generator beside it goes through [`seeded`](crate::seeded).
    pub fn new(config: PretrainConfig, device: &B::Device) -> Result<Self> {
        config.validate()?;
        // Burn initialises parameters lazily, on first use, and a clone of a parameter not yet
        // used initialises on its own from the generator as it stands then: the first checkpoint
        // (which saves a clone) would hold other weights than the ones trained. Draw them all
        // now, under the seed.
        let model = crate::seeded::<B, _>(device, config.seed, || {
            config
                .model
                .init_seeded::<B>(device, config.seed)
                .map(crate::materialised)
        })?;
        Ok(Self {
            model,
            opt_backbone: adamw(&config.backbone),
            opt_head: adamw(&config.head),
            opt_operators: adamw(&config.operators),
            opt_variational: adamw(&config.variational),
            state: TrainState {
                epochs_done: 0,
                steps_done: 0,
                train_seconds: 0.0,
            },
            config,
        })
    }

    /// The run's settings.
    pub fn config(&self) -> &PretrainConfig {
        &self.config
    }

    /// A copy of the model, its optimisers and the state on `device`, for another device of a
    /// data-parallel run (the optimisers' moments follow their parameters to the device at the
    /// first step). The copy is a model of its own, loaded from this one's record: a clone
    /// would share Burn's running states (batch-norm averages), which merge the updates of the
    /// threads that share them in the order they come.
    #[cfg(feature = "distributed")]
    pub(crate) fn replica(&self, device: &B::Device) -> Result<Self> {
        // Loading a record into a fresh module draws some of the values it then replaces (Burn
        // initialises a parameter when a visitor reads it): under the seed's lock, so that
        // these draws cannot fall into another thread's seeded initialisation.
        let seed = self.config.seed;
        let model = crate::seeded::<B, _>(device, seed, || {
            self.config
                .model
                .init_seeded::<B>(device, seed)
                .map(|fresh| fresh.load_record(self.model.clone().into_record()))
        })?
        .fork(device);
        Ok(Self {
            model,
            opt_backbone: self.opt_backbone.clone(),
            opt_head: self.opt_head.clone(),
            opt_operators: self.opt_operators.clone(),
            opt_variational: self.opt_variational.clone(),
            state: self.state,
            config: self.config.clone(),
        })
    }

    /// Trains until `config.epochs` (from where the state stands), writing a checkpoint into
    /// `checkpoints` after every epoch. A non-finite loss or gradient norm stops with an error
    /// before the step is applied; the last checkpoint is the last good state. With
    /// `config.devices` > 1, the devices are that many threads on `device` (see
    /// [`Pretrainer::run_on`] for one device each).
    pub fn run(
        &mut self,
        data: &dyn ViewSource,
        checkpoints: &Path,
        hooks: &mut dyn PretrainHooks<B>,
        device: &B::Device,
    ) -> Result<()> {
        #[cfg(feature = "distributed")]
        if self.config.devices > 1 {
            let devices = vec![device.clone(); self.config.devices];
            return self.run_on(data, checkpoints, hooks, &devices);
        }
        // Without the feature, validation refuses devices > 1.
        self.run_part(data, checkpoints, Some(hooks), device, None)
    }

    /// The loop on one part of every batch (all of it without `sync`): only the part with
    /// hooks (rank 0) writes checkpoints and calls them.
    pub(crate) fn run_part(
        &mut self,
        data: &dyn ViewSource,
        checkpoints: &Path,
        mut hooks: Option<&mut dyn PretrainHooks<B>>,
        device: &B::Device,
        sync: Option<&dyn StepSync<B>>,
    ) -> Result<()> {
        let c = self.config.clone();
        if data.shape()[0] != c.model.in_channels {
            return Err(ClrError::invalid(
                "views",
                format!("{:?}", data.shape()),
                format!("{} channels (the backbone's)", c.model.in_channels),
            ));
        }
        let per_epoch = data.len() / c.batch_size;
        if per_epoch == 0 {
            return Err(ClrError::invalid(
                "training images",
                data.len(),
                format!("at least one batch of {}", c.batch_size),
            ));
        }
        let schedules =
            [&c.backbone, &c.head, &c.operators, &c.variational].map(|g| c.schedule(g, per_epoch));
        let shape = data.shape();
        let (rank, parts) = sync.map_or((0, 1), |s| (s.rank(), s.parts()));
        let local = c.batch_size / parts;
        for epoch in self.state.epochs_done..c.epochs {
            let start = Instant::now();
            let order = epoch_order(c.seed, epoch, data.len());
            // This part's images of every batch of the epoch.
            let batches: Vec<&[usize]> = order
                .chunks_exact(c.batch_size)
                .map(|b| &b[rank * local..(rank + 1) * local])
                .collect();
            std::thread::scope(|scope| -> Result<()> {
                // The views of the next batches are made on another thread while the device
                // runs the step: a bounded queue, at most PREFETCH batches ahead. The views are
                // keyed by (seed, epoch, index, view), so the order of their making is free.
                let (tx, rx) = std::sync::mpsc::sync_channel(PREFETCH);
                let ahead = batches.clone();
                scope.spawn(move || {
                    for batch in ahead {
                        let views = data.views(batch, epoch);
                        let failed = views.is_err();
                        if tx.send(views).is_err() || failed {
                            break;
                        }
                    }
                });
                for views in rx.iter().take(batches.len()) {
                    // The step's time counts the wait for views that were not ready.
                    let t = Instant::now();
                    // Every part stops together: one that failed would leave the others
                    // waiting for it in the next exchange.
                    let views = agree(sync, views)?;
                    let log =
                        self.train_step(epoch, shape, local, views, &schedules, device, t, sync);
                    let done = log.and_then(|log| match hooks.as_deref_mut() {
                        Some(h) => h.step(&log),
                        None => Ok(()),
                    });
                    agree(sync, done)?;
                }
                Ok(())
            })?;
            self.state.epochs_done = epoch + 1;
            self.state.train_seconds += start.elapsed().as_secs_f64();
            let saved = match hooks.as_deref_mut() {
                Some(h) => self
                    .save(checkpoints)
                    .and_then(|()| h.epoch_end(epoch + 1, &self.model)),
                None => Ok(()),
            };
            agree(sync, saved)?;
        }
        Ok(())
    }

    /// One optimisation step on the views of `n` images of `shape` [C, H, W] (this part's, with
    /// `sync`). Its figures come back from the device in one read (the losses, the groups'
    /// gradient norms and the manifold figures, all computed there); a non-finite one stops
    /// the run there, before the step is applied. With `sync`, the groups' gradients are summed
    /// over the parts before clipping, and the figures are the parts' means.
    #[allow(clippy::too_many_arguments)]
    fn train_step(
        &mut self,
        epoch: usize,
        [ch, h, w]: [usize; 3],
        n: usize,
        [v0, v1]: [Vec<f32>; 2],
        schedules: &[WarmupCosine; 4],
        device: &B::Device,
        started: Instant,
        sync: Option<&dyn StepSync<B>>,
    ) -> Result<StepLog> {
        let c = &self.config;
        let v0 = Tensor::<B, 4>::from_data(TensorData::new(v0, [n, ch, h, w]), device);
        let v1 = Tensor::<B, 4>::from_data(TensorData::new(v1, [n, ch, h, w]), device);
        let step = self.state.steps_done;
        let exchange: Option<&dyn Exchange<B>> = match sync {
            Some(s) => Some(s),
            None if c.sync_batch_norm => Some(&OneDevice),
            None => None,
        };
        let out = self.model.step_with(v0, v1, step as u64, exchange)?;
        let mut grads = out.loss.clone().backward();
        let summed = |g: GradientsParams| match sync {
            Some(s) => s.sum_grads(g),
            None => Ok(g),
        };
        let mut g_backbone = summed(GradientsParams::from_module(
            &mut grads,
            &self.model.backbone,
        ))?;
        let mut g_head = summed(GradientsParams::from_module(&mut grads, &self.model.head))?;
        // The operators' gradients leave `grads` first, so that the rest of the VLGO model's
        // are the encoder's and prior's, clipped together.
        let mut g_vlgo = match self.model.vlgo.as_ref() {
            Some(v) => {
                let ops = summed(GradientsParams::from_module(&mut grads, &v.operators))?;
                Some((ops, summed(GradientsParams::from_module(&mut grads, v))?))
            }
            None => None,
        };
        let mut figures = vec![
            out.loss.clone().inner(),
            out.loss_nce.clone().inner(),
            clip_global_norm(&self.model.backbone, &mut g_backbone, c.backbone.clip),
            clip_global_norm(&self.model.head, &mut g_head, c.head.clip),
        ];
        // The manifold part of the vector: the operators' and the encoder and prior's norms, L_m,
        // KL, then the figures (from index 8).
        let with_manifold = self.model.vlgo.is_some() && out.manifold.is_some();
        if let (Some(v), Some((ops, var)), Some(m)) = (&self.model.vlgo, &mut g_vlgo, &out.manifold)
        {
            figures.extend([
                clip_global_norm(&v.operators, ops, c.operators.clip),
                clip_global_norm(v, var, c.variational.clip),
                m.loss_manifold.clone().inner(),
                m.kl.clone().inner(),
                m.figures.clone().inner(),
            ]);
        }
        let figures = Tensor::cat(figures, 0);
        let figures = match sync {
            Some(s) => s.mean(figures)?,
            None => figures,
        };
        let values = read_floats(figures, "step figures")?;
        let value = |i: usize| f64::from(values[i]);
        let diverged = |what, value| ClrError::Diverged {
            epoch: epoch + 1,
            step: step + 1,
            what,
            value,
        };
        let (loss, loss_nce, grad_norm, head_norm) = (value(0), value(1), value(2), value(3));
        if !loss.is_finite() {
            return Err(diverged("loss", loss));
        }
        let manifold = match with_manifold {
            true => {
                let (o, v) = (value(4), value(5));
                if !o.is_finite() {
                    return Err(diverged("operators gradient norm", o));
                }
                if !v.is_finite() {
                    return Err(diverged("encoder and prior gradient norm", v));
                }
                let figures = ManifoldFigures::decode(&values[8..])?;
                Some(ManifoldLog {
                    loss_manifold: value(6),
                    kl: value(7),
                    distance_improvement: figures.distance_improvement,
                    diagnostics: figures.diagnostics,
                    operators_grad_norm: o,
                    variational_grad_norm: v,
                })
            }
            false => None,
        };
        // A NaN input can leave the loss finite (ReLU maps NaN to 0) and still poison the
        // weights through their gradients: check those too, before the step.
        if !grad_norm.is_finite() {
            return Err(diverged("backbone gradient norm", grad_norm));
        }
        if !head_norm.is_finite() {
            return Err(diverged("head gradient norm", head_norm));
        }
        // Each part's figures of its own features: the first part's are logged.
        let features = match c.spectrum_every {
            _ if sync.is_some_and(|s| s.rank() > 0) => None,
            0 => None,
            k if !step.is_multiple_of(k) => None,
            _ => Some(FeatureLog::of(out.features.detach())?),
        };
        let [s_backbone, s_head, s_operators, s_variational] = schedules;
        let lr = s_backbone.lr(step);
        let model = self.model.clone();
        let model = self.opt_backbone.step(lr, model, g_backbone);
        let mut model = self.opt_head.step(s_head.lr(step), model, g_head);
        if let Some((ops, var)) = g_vlgo {
            model = self.opt_operators.step(s_operators.lr(step), model, ops);
            model = self
                .opt_variational
                .step(s_variational.lr(step), model, var);
        }
        self.model = model;
        self.state.steps_done += 1;
        let parts = sync.map_or(1, |s| s.parts());
        Ok(StepLog {
            step: self.state.steps_done,
            epoch: epoch + 1,
            loss_nce,
            lr,
            grad_norm,
            images_per_second: (n * parts) as f64 / started.elapsed().as_secs_f64(),
            exchange_seconds: sync.map(|s| s.take_exchange_seconds()),
            features,
            manifold,
        })
    }

    /// The optimisers in use with their checkpoint files: the operators' and the encoder's and
    /// prior's only for the methods with operators.
    fn optimisers(&self) -> Vec<(&'static str, &Adam<B>)> {
        let all = [
            &self.opt_backbone,
            &self.opt_head,
            &self.opt_operators,
            &self.opt_variational,
        ];
        let used = if self.model.vlgo.is_some() { 4 } else { 2 };
        OPTIM_FILES.into_iter().zip(all).take(used).collect()
    }

    /// Writes model, optimisers and state into `dir` atomically: into a fresh sibling folder
    /// first, which then replaces `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let tmp = dir.with_extension("partial");
        let io = |e: std::io::Error, p: &Path| ClrError::Io {
            path: p.to_path_buf(),
            source: e,
        };
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| io(e, &tmp))?;
        let rec = BinFileRecorder::<FullPrecisionSettings>::new();
        let record_err = |e: burn::record::RecorderError| ClrError::Checkpoint(e.to_string());
        self.model
            .clone()
            .save_file(tmp.join("model"), &rec)
            .map_err(record_err)?;
        for (name, opt) in self.optimisers() {
            Recorder::<B>::record(&rec, opt.to_record(), tmp.join(name)).map_err(record_err)?;
        }
        let state = serde_json::to_string_pretty(&self.state).expect("state serialises");
        std::fs::write(tmp.join("state.json"), state).map_err(|e| io(e, &tmp))?;
        let old = dir.with_extension("old");
        let _ = std::fs::remove_dir_all(&old);
        if dir.exists() {
            std::fs::rename(dir, &old).map_err(|e| io(e, dir))?;
        }
        std::fs::rename(&tmp, dir).map_err(|e| io(e, dir))?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(())
    }

    /// A run continued from the checkpoint in `dir` (written by [`Pretrainer::save`] with the same
    /// settings).
    pub fn resume(config: PretrainConfig, dir: &Path, device: &B::Device) -> Result<Self> {
        let mut fresh = Self::new(config, device)?;
        let rec = BinFileRecorder::<FullPrecisionSettings>::new();
        // Records are positional: a checkpoint of other model settings, or of a build whose
        // modules differ, fails to decode rather than loading the wrong tensors.
        let record_err = |e: burn::record::RecorderError| {
            ClrError::Checkpoint(format!(
                "{} does not load ({e}); was it written with other model settings or by another \
                 version of vlgo?",
                dir.display()
            ))
        };
        fresh.model = fresh
            .model
            .load_file(dir.join("model"), &rec, device)
            .map_err(record_err)?;
        let load = |opt: Adam<B>, name: &str| -> Result<Adam<B>> {
            let record = Recorder::<B>::load(&rec, dir.join(name), device).map_err(record_err)?;
            Ok(opt.load_record(record))
        };
        fresh.opt_backbone = load(fresh.opt_backbone, OPTIM_FILES[0])?;
        fresh.opt_head = load(fresh.opt_head, OPTIM_FILES[1])?;
        if fresh.model.vlgo.is_some() {
            fresh.opt_operators = load(fresh.opt_operators, OPTIM_FILES[2])?;
            fresh.opt_variational = load(fresh.opt_variational, OPTIM_FILES[3])?;
        }
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path).map_err(|e| ClrError::Io {
            path: path.clone(),
            source: e,
        })?;
        fresh.state = serde_json::from_str(&text)
            .map_err(|e| ClrError::Checkpoint(format!("{}: {e}", path.display())))?;
        Ok(fresh)
    }

    /// The backbone in evaluation mode (batch-norm running statistics, no graph).
    pub fn eval_backbone(&self) -> crate::ResNet18<B::InnerBackend> {
        self.model.backbone.valid()
    }
}

/// The order in which epoch `epoch` visits `n` samples: a shuffle keyed by (seed, epoch), so a
/// resumed run visits them as an uninterrupted one does.
pub(crate) fn epoch_order(seed: u64, epoch: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut StreamRng::seed_from_u64(
        seed ^ (epoch as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeded orders, pinned (the generator and the shuffle's algorithm both): a dependency
    /// update that changes them, and with them every training run, fails here.
    #[test]
    fn epoch_orders_and_label_splits_are_pinned() {
        assert_eq!(epoch_order(0, 0, 10), [9, 1, 0, 6, 5, 8, 4, 3, 2, 7]);
        assert_eq!(epoch_order(5, 3, 10), [0, 3, 5, 2, 4, 9, 6, 7, 1, 8]);
        let labels: Vec<u16> = (0..30).map(|i| (i % 3) as u16).collect();
        let split = crate::semisup::label_split(&labels, 3, 2, 4, 1).unwrap();
        assert_eq!(split, [12, 18, 1, 19, 8, 23]);
        // The probe's order: the generator seeded as `linear_probe` seeds it.
        let mut probe: Vec<usize> = (0..10).collect();
        probe.shuffle(&mut StreamRng::seed_from_u64(3));
        assert_eq!(probe, [5, 4, 1, 3, 9, 7, 8, 6, 2, 0]);
    }
}
