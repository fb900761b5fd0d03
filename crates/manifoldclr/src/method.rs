//! Contrastive methods behind one interface: a backbone, an optional projection head and the
//! InfoNCE variant that goes with it. The ManifoldCLR methods extend [`Method`] with the Lie
//! group feature augmentation.

use std::fmt;
use std::str::FromStr;

use burn::module::Module;
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use vlgo_core::layers::LayerBackend;

use crate::backbone::{ResNet18, ResNet18Config};
use crate::error::{ClrError, Result};
use crate::head::{HeadKind, ProjectionHead};
use crate::info_nce::{InfoNceConfig, info_nce};

/// The contrastive methods, by their config names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Method {
    /// MLP head, cosine InfoNCE on (z0, z1).
    SimClrMlp,
    /// Linear head, cosine InfoNCE.
    SimClrLinear,
    /// No head: negative mean squared distance on the raw features.
    SimClrNone,
    /// No head, the negative mean squared distance on the first `direct_dims` features only.
    DirectClr,
}

impl Method {
    /// Every method, in the order of the paper's table.
    pub const ALL: [Method; 4] = [
        Method::SimClrMlp,
        Method::SimClrLinear,
        Method::SimClrNone,
        Method::DirectClr,
    ];

    /// The config name (`simclr-mlp`, `simclr-linear`, `simclr-none`, `directclr`).
    pub fn name(self) -> &'static str {
        match self {
            Method::SimClrMlp => "simclr-mlp",
            Method::SimClrLinear => "simclr-linear",
            Method::SimClrNone => "simclr-none",
            Method::DirectClr => "directclr",
        }
    }

    /// The head the method trains.
    pub fn head(self) -> HeadKind {
        match self {
            Method::SimClrMlp => HeadKind::Mlp,
            Method::SimClrLinear => HeadKind::Linear,
            Method::SimClrNone | Method::DirectClr => HeadKind::None,
        }
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
                    "one of simclr-mlp, simclr-linear, simclr-none, directclr",
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
    /// Features DirectCLR contrasts (the first ones).
    pub direct_dims: usize,
}

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
        if self.method == Method::DirectClr
            && !(1..=self.backbone().features()).contains(&self.direct_dims)
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
        Ok(())
    }

    fn loss_config(&self) -> InfoNceConfig {
        InfoNceConfig {
            temperature: self.temperature,
            ..self.method.info_nce()
        }
    }

    /// The model, initialised.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<ContrastiveModel<B>> {
        self.validate()?;
        let backbone = self.backbone().init(device)?;
        let head = ProjectionHead::new(
            self.method.head(),
            backbone.features(),
            self.head_hidden,
            self.head_output,
            device,
        )?;
        Ok(ContrastiveModel {
            backbone,
            head,
            loss: self.loss_config(),
            contrast_dims: match self.method {
                Method::DirectClr => self.direct_dims,
                _ => self.backbone().features(),
            },
        })
    }
}

/// The loss of one step and the features it saw.
#[derive(Debug, Clone)]
pub struct StepLoss<B: Backend> {
    /// The InfoNCE loss, shape [1].
    pub loss: Tensor<B, 1>,
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
    #[module(skip)]
    loss: InfoNceConfig,
    contrast_dims: usize,
}

impl<B: Backend> ContrastiveModel<B> {
    /// The loss of a batch of view pairs [B, C, H, W] each: both views through the backbone in
    /// one pass (batch-norm statistics over both), the head over the 2B features in one pass,
    /// InfoNCE on the pairs.
    pub fn step(&self, view0: Tensor<B, 4>, view1: Tensor<B, 4>) -> Result<StepLoss<B>>
    where
        B: LayerBackend,
    {
        if view0.dims() != view1.dims() || view0.dims()[0] < 2 {
            return Err(ClrError::invalid(
                "views",
                format!("{:?} and {:?}", view0.dims(), view1.dims()),
                "two batches of the same shape with at least 2 images",
            ));
        }
        let n = view0.dims()[0];
        let features = self.backbone.forward(Tensor::cat(vec![view0, view1], 0))?;
        let contrasted = if self.head.is_identity() {
            let d = features.dims()[1];
            features
                .clone()
                .slice([0..2 * n, 0..self.contrast_dims.min(d)])
        } else {
            self.head.forward(features.clone())?
        };
        let a = contrasted.clone().narrow(0, 0, n);
        let b = contrasted.narrow(0, n, n);
        let loss = info_nce(a, b, None, &self.loss)?;
        Ok(StepLoss { loss, features })
    }
}
