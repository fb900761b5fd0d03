//! Contrastive methods behind one interface: a backbone, an optional projection head and the
//! InfoNCE variant that goes with it. The ManifoldCLR methods add the Lie group feature
//! augmentation of [`crate::manifold`] (ManifoldMixupCLR a per-sample mix of the two views).

use std::fmt;
use std::str::FromStr;

use burn::module::Module;
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use vlgo_core::layers::LayerBackend;
use vlgo_core::{ExpmBackend, NoiseStreams};
use vlgo_nn::Vlgo;

use crate::backbone::{ResNet18, ResNet18Config};
use crate::error::{ClrError, Result};
use crate::head::{HeadKind, ProjectionHead};
use crate::info_nce::{InfoNceConfig, Similarity, info_nce};
use crate::manifold::{ManifoldConfig, ManifoldStep, manifold_step, mixup};
use crate::norm::{OwnStats, StatsSum};

/// Mixed into the run's seed for the operators' initialisation.
const OPERATOR_SEED: u64 = 0x0be7_a70e;

/// The contrastive methods, by their config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
#[non_exhaustive]
pub enum Method {
    /// MLP head, cosine InfoNCE on (z0, z1).
    SimClrMlp,
    /// Linear head, cosine InfoNCE.
    SimClrLinear,
    /// No head: negative mean squared distance on the raw features.
    SimClrNone,
    /// No head, the negative mean squared distance on the first `direct_dims` features only.
    DirectClr,
    /// MLP head; InfoNCE on (T(c~) z0, z1) with c~ from the learned prior; lambda = 10.
    ManifoldClrMlp,
    /// No head; negative mean squared distance InfoNCE on (T(c~) z0, z1), clean z0 as extra
    /// negatives; lambda = 1.
    ManifoldClr,
    /// No head; the anchor is l z0 + (1 - l) z1 with l ~ U(0, 1) per sample (no operators).
    ManifoldMixupClr,
    /// ManifoldCLR on the first `direct_dims` features with one dense dictionary of that size.
    ManifoldDirectClr,
}

impl Method {
    /// Every method, in the order of the paper's table.
    pub const ALL: [Method; 8] = [
        Method::SimClrMlp,
        Method::SimClrLinear,
        Method::SimClrNone,
        Method::DirectClr,
        Method::ManifoldClrMlp,
        Method::ManifoldClr,
        Method::ManifoldMixupClr,
        Method::ManifoldDirectClr,
    ];

    /// The config name (as configs write it).
    pub fn name(self) -> &'static str {
        match self {
            Method::SimClrMlp => "simclr-mlp",
            Method::SimClrLinear => "simclr-linear",
            Method::SimClrNone => "simclr-none",
            Method::DirectClr => "directclr",
            Method::ManifoldClrMlp => "manifoldclr-mlp",
            Method::ManifoldClr => "manifoldclr",
            Method::ManifoldMixupClr => "manifold-mixupclr",
            Method::ManifoldDirectClr => "manifold-directclr",
        }
    }

    /// The head the method trains.
    pub fn head(self) -> HeadKind {
        match self {
            Method::SimClrMlp | Method::ManifoldClrMlp => HeadKind::Mlp,
            Method::SimClrLinear => HeadKind::Linear,
            _ => HeadKind::None,
        }
    }

    /// Whether the method trains Lie group operators (and their encoder and prior).
    pub fn uses_operators(self) -> bool {
        matches!(
            self,
            Method::ManifoldClrMlp | Method::ManifoldClr | Method::ManifoldDirectClr
        )
    }

    /// Whether the method contrasts only the first `direct_dims` features.
    pub fn is_direct(self) -> bool {
        matches!(self, Method::DirectClr | Method::ManifoldDirectClr)
    }

    /// The InfoNCE variant: cosine with a head, negative mean squared distance without.
    pub fn info_nce(self) -> InfoNceConfig {
        match self.head() {
            HeadKind::None => InfoNceConfig::negative_mean_square(),
            _ => InfoNceConfig::cosine(),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = ClrError;

    fn from_str(s: &str) -> Result<Self> {
        Method::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                ClrError::invalid(
                    "method",
                    format!("{s:?}"),
                    Method::ALL.map(Method::name).join(", "),
                )
            })
    }
}

impl TryFrom<String> for Method {
    type Error = ClrError;

    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Method> for String {
    fn from(m: Method) -> String {
        m.name().to_string()
    }
}

/// Settings of a [`ContrastiveModel`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContrastiveConfig {
    /// The method.
    pub method: Method,
    /// Backbone width (64 for ResNet-18 proper).
    pub width: usize,
    /// Input channels (3, or 1 for grayscale data).
    pub in_channels: usize,
    /// Keep the max-pool after the stem (64 x 64 inputs).
    pub max_pool: bool,
    /// Hidden units of the MLP head.
    pub head_hidden: usize,
    /// Output of the heads.
    pub head_output: usize,
    /// InfoNCE temperature.
    pub temperature: f64,
    /// Features DirectCLR and ManifoldDirectCLR contrast (the first ones).
    pub direct_dims: usize,
    /// InfoNCE's similarity (`cosine`, `unit-distance` or `neg-mse`); unset: the method's own
    /// (cosine with a head, `neg-mse` without). `cosine` on a head-less method gives the
    /// normalised rows of the paper's Table 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<Similarity>,
    /// The Lie group part of the ManifoldCLR methods (ignored by the others).
    #[serde(default)]
    pub manifold: ManifoldConfig,
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above, implemented by hand for the
/// reason given at [`ManifoldConfig`]'s.
impl burn::config::Config for ContrastiveConfig {}

impl ContrastiveConfig {
    /// The protocol's settings for `method`: ResNet-18 at width 64, head 1024 -> 128, tau 0.5,
    /// DirectCLR on 64 features.
    pub fn new(method: Method) -> Self {
        Self {
            method,
            width: 64,
            in_channels: 3,
            max_pool: false,
            head_hidden: 1024,
            head_output: 128,
            temperature: 0.5,
            direct_dims: 64,
            similarity: None,
            manifold: ManifoldConfig::default(),
        }
    }

    /// The backbone's settings.
    pub fn backbone(&self) -> ResNet18Config {
        ResNet18Config::new()
            .with_width(self.width)
            .with_in_channels(self.in_channels)
            .with_max_pool(self.max_pool)
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        self.backbone().validate()?;
        self.loss_config().validate()?;
        if self.method.is_direct() && !(1..=self.backbone().features()).contains(&self.direct_dims)
        {
            return Err(ClrError::invalid(
                "direct_dims",
                self.direct_dims,
                format!(
                    "in 1..={} (the backbone's features)",
                    self.backbone().features()
                ),
            ));
        }
        if self.method.uses_operators() {
            self.vlgo_config(0)?;
        }
        Ok(())
    }

    /// Features the method contrasts (and its operators act on).
    fn contrast_dims(&self) -> usize {
        match self.method.is_direct() {
            true => self.direct_dims,
            false => self.backbone().features(),
        }
    }

    fn vlgo_config(&self, seed: u64) -> Result<vlgo_nn::VlgoConfig> {
        self.manifold
            .vlgo(self.contrast_dims(), self.method.is_direct(), seed)
    }

    fn loss_config(&self) -> InfoNceConfig {
        let base = match self.similarity {
            None => self.method.info_nce(),
            Some(Similarity::NegativeMeanSquare) => InfoNceConfig::negative_mean_square(),
            Some(similarity) => InfoNceConfig {
                similarity,
                ..InfoNceConfig::cosine()
            },
        };
        InfoNceConfig {
            temperature: self.temperature,
            ..base
        }
    }

    /// The model, initialised (operators from seed 0; see [`ContrastiveConfig::init_seeded`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<ContrastiveModel<B>> {
        self.init_seeded(device, 0)
    }

    /// The model, initialised: layers from the backend's generator, the operators' draws and
    /// the step noise (coefficient samples, mixing weights) from `seed`.
    pub fn init_seeded<B: Backend>(
        &self,
        device: &B::Device,
        seed: u64,
    ) -> Result<ContrastiveModel<B>> {
        self.validate()?;
        let backbone = self.backbone().init(device)?;
        let head = ProjectionHead::new(
            self.method.head(),
            backbone.features(),
            self.head_hidden,
            self.head_output,
            device,
        )?;
        let vlgo = match self.method.uses_operators() {
            // The operators draw from stream (0, 0) of their seed, which the first step's
            // coefficient noise would read too: give them a seed of their own.
            true => Some(self.vlgo_config(seed ^ OPERATOR_SEED)?.init(device)?),
            false => None,
        };
        Ok(ContrastiveModel {
            backbone,
            head,
            vlgo,
            loss: self.loss_config(),
            contrast_dims: self.contrast_dims(),
            method: self.method,
            lambda: self.manifold.lambda(self.method.head() != HeadKind::None),
            manifold: self.manifold.clone(),
            seed,
        })
    }
}

/// How a training step sees the other devices of a data-parallel run: which equal part of the
/// global batch it holds, and the rows of every part. `manifoldclr::distributed::Peer` is one
/// (feature `distributed`).
pub trait Exchange<B: Backend> {
    /// This part's index, in `0..parts()`.
    fn rank(&self) -> usize;
    /// The number of equal parts of the global batch.
    fn parts(&self) -> usize;
    /// The `[n, d]` rows of every part in rank order, `[parts * n, d]`, this part's own rows
    /// differentiable, the others' constants (each part differentiates its own).
    fn gather_rows(&self, rows: Tensor<B, 2>) -> Result<Tensor<B, 2>>;
    /// The sums that synchronise batch norm over the parts (none: each part normalises with
    /// its own statistics).
    fn batch_stats(&self) -> Option<&dyn StatsSum<B>> {
        None
    }
}

/// The whole batch on this device, with batch norm through the synchronised form's arithmetic
/// ([`OwnStats`]): the one-device reference of a run with synchronised batch norm.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneDevice;

impl<B: Backend> Exchange<B> for OneDevice {
    fn rank(&self) -> usize {
        0
    }

    fn parts(&self) -> usize {
        1
    }

    fn gather_rows(&self, rows: Tensor<B, 2>) -> Result<Tensor<B, 2>> {
        Ok(rows)
    }

    fn batch_stats(&self) -> Option<&dyn StatsSum<B>> {
        Some(&OwnStats)
    }
}

/// The loss of one step and the features it saw.
#[derive(Debug, Clone)]
pub struct StepLoss<B: Backend> {
    /// The loss to minimise, shape `[1]`: InfoNCE, plus lambda L_m + beta KL for the methods with
    /// operators.
    pub loss: Tensor<B, 1>,
    /// The InfoNCE term, shape `[1]`.
    pub loss_nce: Tensor<B, 1>,
    /// The manifold terms and diagnostics (methods with operators).
    pub manifold: Option<ManifoldStep<B>>,
    /// Backbone features of both views, [2B, features] (view 0 rows first).
    pub features: Tensor<B, 2>,
}

/// A backbone with its head and loss.
#[derive(Module, Debug)]
pub struct ContrastiveModel<B: Backend> {
    /// The encoder being pre-trained.
    pub backbone: ResNet18<B>,
    /// The projection head (an identity for the head-less methods).
    pub head: ProjectionHead<B>,
    /// Operators, coefficient encoder and learned prior (the methods with operators).
    pub vlgo: Option<Vlgo<B>>,
    #[module(skip)]
    loss: InfoNceConfig,
    contrast_dims: usize,
    #[module(skip)]
    method: Method,
    #[module(skip)]
    lambda: f64,
    #[module(skip)]
    manifold: ManifoldConfig,
    #[module(skip)]
    seed: u64,
}

impl<B: Backend> ContrastiveModel<B> {
    /// The method this model trains.
    pub fn method(&self) -> Method {
        self.method
    }

    /// The loss of a batch of view pairs [B, C, H, W] each at training iteration `iteration`
    /// (which keys the step's noise and drives the prior's warm-up and best-of-J): both views
    /// through the backbone in one pass (batch-norm statistics over both), the head over the 2B
    /// features in one pass, InfoNCE on the pairs, or on the augmented pairs with the manifold
    /// terms added (`docs/manifoldclr.md`).
    pub fn step(
        &self,
        view0: Tensor<B, 4>,
        view1: Tensor<B, 4>,
        iteration: u64,
    ) -> Result<StepLoss<B>>
    where
        B: LayerBackend + ExpmBackend,
    {
        self.step_with(view0, view1, iteration, None)
    }

    /// [`step`](Self::step) on this device's part of a global batch split over `exchange`'s
    /// parts (data-parallel training; `None`: the whole batch is here). InfoNCE contrasts the
    /// gathered rows of every part (its value is the global batch's, the same on every part);
    /// the step's noise is this part's rows of the global batch's; batch norm normalises with
    /// the exchange's [`batch_stats`](Exchange::batch_stats) if it has them (synchronised),
    /// else with this part's own statistics; the per-sample manifold terms are divided by the
    /// number of parts, so that the parts' gradients, summed, are the global batch's.
    pub fn step_with(
        &self,
        view0: Tensor<B, 4>,
        view1: Tensor<B, 4>,
        iteration: u64,
        exchange: Option<&dyn Exchange<B>>,
    ) -> Result<StepLoss<B>>
    where
        B: LayerBackend + ExpmBackend,
    {
        if view0.dims() != view1.dims() || view0.dims()[0] < 2 {
            return Err(ClrError::invalid(
                "views",
                format!("{:?} and {:?}", view0.dims(), view1.dims()),
                "two batches of the same shape with at least 2 images",
            ));
        }
        let (streams, parts) = match exchange {
            Some(e) => (
                NoiseStreams::new(self.seed).shard(e.rank(), e.parts())?,
                e.parts(),
            ),
            None => (NoiseStreams::new(self.seed), 1),
        };
        let gather = |rows: Tensor<B, 2>| match exchange {
            Some(e) => e.gather_rows(rows),
            None => Ok(rows),
        };
        let n = view0.dims()[0];
        let stats = exchange.and_then(|e| e.batch_stats());
        let features = self
            .backbone
            .try_forward_with(Tensor::cat(vec![view0, view1], 0), stats)?;
        let d = self.contrast_dims.min(features.dims()[1]);
        let z0 = features.clone().slice([0..n, 0..d]);
        let z1 = features.clone().slice([n..2 * n, 0..d]);
        // The moved z0 that replaces z0 as the anchor (none: the plain pair is contrasted).
        let (anchor, manifold) = match (&self.vlgo, self.method) {
            (Some(vlgo), _) => {
                let (anchor, m) = manifold_step(
                    vlgo,
                    &self.manifold,
                    self.lambda,
                    z0.clone(),
                    z1.clone(),
                    iteration,
                    streams,
                )?;
                (anchor, Some(m))
            }
            (None, Method::ManifoldMixupClr) => (
                Some(mixup(z0.clone(), z1.clone(), iteration, streams)),
                None,
            ),
            (None, _) => (None, None),
        };
        let loss_nce = if !self.head.is_identity() {
            let projected = self.head.try_forward_with(features.clone(), stats)?;
            let h1 = projected.clone().narrow(0, n, n);
            // h(z0~) is its own pass (own batch-norm statistics).
            let h0 = match anchor {
                Some(a) => self.head.try_forward_with(a, stats)?,
                None => projected.narrow(0, 0, n),
            };
            info_nce(gather(h0)?, gather(h1)?, None, &self.loss)?
        } else {
            match anchor {
                Some(a) => info_nce(gather(a)?, gather(z1)?, Some(gather(z0)?), &self.loss)?,
                None => info_nce(gather(z0)?, gather(z1)?, None, &self.loss)?,
            }
        };
        let loss = match &manifold {
            Some(m) if parts > 1 => loss_nce.clone() + m.loss.clone().div_scalar(parts as f64),
            Some(m) => loss_nce.clone() + m.loss.clone(),
            None => loss_nce.clone(),
        };
        Ok(StepLoss {
            loss,
            loss_nce,
            manifold,
            features,
        })
    }
}
