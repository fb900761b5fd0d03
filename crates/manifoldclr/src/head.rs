//! Projection heads between the backbone's features and the contrastive loss.

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, Relu};
use burn::prelude::*;
use serde::{Deserialize, Serialize};
use vlgo_core::layers::LayerBackend;

use crate::error::{ClrError, Result};
use crate::norm::{StatsSum, batch_norm};

/// Which head: the protocol's MLP (Linear d -> 1024, BatchNorm1d, ReLU, Linear 1024 -> 128), one
/// linear layer d -> 128, or none (the loss sees the raw features).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum HeadKind {
    /// Linear, BatchNorm1d, ReLU, Linear.
    Mlp,
    /// One linear layer.
    Linear,
    /// No head.
    None,
}

/// A projection head (PyTorch's default initialisation for its linear layers, batch norm weight
/// 1 and bias 0).
#[derive(Module, Debug)]
pub struct ProjectionHead<B: Backend> {
    first: Option<Linear<B>>,
    bn: Option<BatchNorm<B>>,
    last: Option<Linear<B>>,
    relu: Relu,
    input: usize,
}

impl<B: Backend> ProjectionHead<B> {
    /// A head of `kind` on `input` features: `hidden` units (1024) and `output` (128).
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn::prelude::*;
    /// use manifoldclr::{HeadKind, ProjectionHead};
    ///
    /// let device = Default::default();
    /// let head = ProjectionHead::<NdArray>::new(HeadKind::Mlp, 512, 1024, 128, &device).unwrap();
    /// assert_eq!(head.forward(Tensor::ones([4, 512], &device)).dims(), [4, 128]);
    /// ```
    pub fn new(
        kind: HeadKind,
        input: usize,
        hidden: usize,
        output: usize,
        device: &B::Device,
    ) -> Result<Self> {
        if input == 0 || hidden == 0 || output == 0 {
            return Err(ClrError::invalid(
                "head sizes",
                format!("{input} -> {hidden} -> {output}"),
                "every size >= 1",
            ));
        }
        let (first, bn, last) = match kind {
            HeadKind::Mlp => (
                Some(LinearConfig::new(input, hidden).init(device)),
                Some(BatchNormConfig::new(hidden).init(device)),
                Some(LinearConfig::new(hidden, output).init(device)),
            ),
            HeadKind::Linear => (
                None,
                None,
                Some(LinearConfig::new(input, output).init(device)),
            ),
            HeadKind::None => (None, None, None),
        };
        Ok(Self {
            first,
            bn,
            last,
            relu: Relu::new(),
            input,
        })
    }

    /// Whether the head does anything.
    pub fn is_identity(&self) -> bool {
        self.last.is_none()
    }

    /// Projects features [B, input]. Panics on a wrong width or on a batch of one with the MLP
    /// head in training mode (batch norm needs two); [`try_forward`](Self::try_forward) returns
    /// an error instead.
    pub fn forward(&self, features: Tensor<B, 2>) -> Tensor<B, 2>
    where
        B: LayerBackend,
    {
        self.try_forward(features).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Fallible [`forward`](Self::forward): an error, not a panic, for inputs of the wrong shape.
    pub fn try_forward(&self, features: Tensor<B, 2>) -> Result<Tensor<B, 2>>
    where
        B: LayerBackend,
    {
        self.try_forward_with(features, None)
    }

    /// [`try_forward`](Self::try_forward) with the batch-norm statistics in training summed
    /// over `stats`' devices (synchronised batch norm; `None`: this batch's own).
    pub fn try_forward_with(
        &self,
        features: Tensor<B, 2>,
        stats: Option<&dyn StatsSum<B>>,
    ) -> Result<Tensor<B, 2>>
    where
        B: LayerBackend,
    {
        let [n, d] = features.dims();
        if d != self.input {
            return Err(ClrError::invalid(
                "head input",
                format!("{:?}", features.dims()),
                format!("[batch, {}]", self.input),
            ));
        }
        let mut x = features;
        if let (Some(first), Some(bn)) = (&self.first, &self.bn) {
            if n < 2 && B::ad_enabled(&x.device()) {
                return Err(ClrError::invalid(
                    "head batch",
                    n,
                    "at least 2 rows to train the MLP head's batch norm",
                ));
            }
            x = self.relu.forward(batch_norm(bn, first.forward(x), stats)?);
        }
        if let Some(last) = &self.last {
            x = last.forward(x);
        }
        Ok(x)
    }
}
