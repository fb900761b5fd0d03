//! InfoNCE (NT-Xent) in the two variants of the paper (with and without a projection
//! head), computed with log-sum-exp.
//!
//! Both views' rows are anchors; the candidates of an anchor are all 2B rows (and any extra
//! negative rows); an anchor's positive is the other view of its image. Per anchor,
//! loss_i = -s(i, p(i)) / tau + log sum_j exp(s(i, j) / tau), averaged over the 2B anchors.

use burn::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{ClrError, Result};

/// How two rows are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Similarity {
    /// u . v of the rows normalised to unit length (SimCLR with a head; tau = 0.5).
    Cosine,
    /// -||u - v||^2 of the unit rows, the paper's way of writing the cosine form:
    /// -||u - v||^2 = 2 u . v - 2 on unit vectors, and a constant shift of every logit leaves
    /// the loss unchanged, so this at temperature tau equals [`Similarity::Cosine`] at tau / 2
    /// (the paper's form at tau = 1 is the dot product at tau = 0.5).
    UnitDistance,
    /// -mean over features of (a - b)^2 on the raw rows (no head: SimCLR-None, DirectCLR,
    /// ManifoldCLR without a head). Written `neg-mse` in configs.
    #[serde(rename = "neg-mse", alias = "negative-mean-square")]
    NegativeMeanSquare,
}

/// Settings of [`info_nce`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InfoNceConfig {
    /// The similarity.
    pub similarity: Similarity,
    /// Temperature tau (> 0).
    pub temperature: f64,
    /// Keep each anchor's similarity to itself among its candidates. The public code keeps it
    /// (the exp(0) term) in the no-head variant; the cosine variant excludes it.
    pub keep_self: bool,
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above, implemented by hand: Burn's
/// derive drops the serde field attributes that let a TOML run config leave settings out.
impl burn::config::Config for InfoNceConfig {}

impl InfoNceConfig {
    /// The variant with a projection head: cosine similarity, tau = 0.5, self excluded.
    pub fn cosine() -> Self {
        Self {
            similarity: Similarity::Cosine,
            temperature: 0.5,
            keep_self: false,
        }
    }

    /// The variant without a head: negative mean squared distance, tau = 0.5, self kept.
    pub fn negative_mean_square() -> Self {
        Self {
            similarity: Similarity::NegativeMeanSquare,
            temperature: 0.5,
            keep_self: true,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(ClrError::invalid(
                "temperature",
                self.temperature,
                "must be finite and > 0",
            ));
        }
        Ok(())
    }
}

/// The InfoNCE loss (a scalar, shape `[1]`) of the positive pairs (a_i, b_i), with `extra` rows
/// (e.g. ManifoldCLR's clean features) as further negatives of every anchor but not anchors.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::prelude::*;
/// use manifoldclr::{InfoNceConfig, info_nce};
///
/// let device = Default::default();
/// let a = Tensor::<NdArray, 2>::from_floats([[1.0, 0.0], [0.0, 1.0]], &device);
/// let loss = info_nce(a.clone(), a, None, &InfoNceConfig::cosine()).unwrap();
/// // Each anchor: positive logit 2, negatives 0 and 0: -2 + ln(e^2 + 2).
/// let want = -2.0 + (2.0f32.exp() + 2.0).ln();
/// assert!((loss.into_scalar() - want).abs() < 1e-5);
/// ```
pub fn info_nce<B: Backend>(
    a: Tensor<B, 2>,
    b: Tensor<B, 2>,
    extra: Option<Tensor<B, 2>>,
    config: &InfoNceConfig,
) -> Result<Tensor<B, 1>> {
    config.validate()?;
    let [n, d] = a.dims();
    if b.dims() != [n, d] || n == 0 || d == 0 {
        return Err(ClrError::invalid(
            "InfoNCE views",
            format!("{:?} and {:?}", a.dims(), b.dims()),
            "two non-empty [batch, features] tensors of the same shape",
        ));
    }
    if let Some(e) = &extra
        && e.dims()[1] != d
    {
        return Err(ClrError::invalid(
            "InfoNCE extra negatives",
            format!("{:?}", e.dims()),
            format!("[rows, {d}]"),
        ));
    }
    let device = a.device();
    let anchors = Tensor::cat(vec![a, b], 0);
    let candidates = match extra {
        Some(e) => Tensor::cat(vec![anchors.clone(), e], 0),
        None => anchors.clone(),
    };
    let logits = similarities(anchors, candidates, config.similarity) / config.temperature;
    let [rows, cols] = logits.dims();
    let logits = if config.keep_self {
        logits
    } else {
        let rows_idx = Tensor::<B, 1, Int>::arange(0..rows as i64, &device).reshape([rows, 1]);
        let cols_idx = Tensor::<B, 1, Int>::arange(0..cols as i64, &device).reshape([1, cols]);
        let diagonal = rows_idx.equal(cols_idx);
        logits.mask_fill(diagonal, f32::NEG_INFINITY)
    };
    // The partner of row i is i + n in the first half and i - n in the second.
    let partner: Vec<i64> = (0..rows)
        .map(|i| if i < n { i + n } else { i - n } as i64)
        .collect();
    let partner = Tensor::<B, 1, Int>::from_data(TensorData::new(partner, [rows]), &device)
        .reshape([rows, 1]);
    let positive = logits.clone().gather(1, partner);
    let loss = log_sum_exp(logits) - positive;
    Ok(loss.mean())
}

/// log sum_j exp(x_ij) per row, shifted by the row's maximum so no term overflows.
fn log_sum_exp<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let max = x.clone().max_dim(1).detach();
    (x - max.clone()).exp().sum_dim(1).log() + max
}

fn similarities<B: Backend>(x: Tensor<B, 2>, y: Tensor<B, 2>, kind: Similarity) -> Tensor<B, 2> {
    match kind {
        Similarity::Cosine => unit_rows(x).matmul(unit_rows(y).transpose()),
        Similarity::UnitDistance => squared_distances(unit_rows(x), unit_rows(y)).neg(),
        Similarity::NegativeMeanSquare => {
            let d = x.dims()[1] as f64;
            squared_distances(x, y).neg() / d
        }
    }
}

/// ||x_i - y_j||^2 for every pair, as |x_i|^2 + |y_j|^2 - 2 x_i . y_j (clamped at 0 against
/// rounding).
fn squared_distances<B: Backend>(x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 2> {
    let xx = x.clone().square().sum_dim(1);
    let yy = y.clone().square().sum_dim(1).transpose();
    (xx + yy - x.matmul(y.transpose()) * 2.0).clamp_min(0.0)
}

/// Rows scaled to unit length (rows of norm below 1e-12 are divided by 1e-12, as PyTorch's
/// `F.normalize` does).
pub fn unit_rows<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
    let norm = x.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
    x / norm
}
