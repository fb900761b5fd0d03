//! Evaluation of frozen features: extraction in evaluation mode, a cosine kNN classifier and the
//! linear probe (protocol "Evaluation").

use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use vlgo_core::StreamRng;
use vlgo_core::layers::LayerBackend;

use crate::backbone::ResNet18;
use crate::error::{ClrError, Result};
use crate::info_nce::unit_rows;

/// Host features: `rows` x `dim` floats, row-major, with a label per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    /// The values.
    pub values: Vec<f32>,
    /// Entries per row.
    pub dim: usize,
    /// One label per row.
    pub labels: Vec<u16>,
}

impl Features {
    /// Checks that the values hold one row of `dim` per label.
    pub fn new(values: Vec<f32>, dim: usize, labels: Vec<u16>) -> Result<Self> {
        if dim == 0 || values.len() != dim * labels.len() {
            return Err(ClrError::invalid(
                "features",
                format!("{} values of dimension {dim}", values.len()),
                format!("{} rows (one per label)", labels.len()),
            ));
        }
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(ClrError::invalid("features", v, "finite values"));
        }
        Ok(Self {
            values,
            dim,
            labels,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Rows `rows` as a tensor.
    pub fn tensor<B: Backend>(
        &self,
        rows: std::ops::Range<usize>,
        device: &B::Device,
    ) -> Tensor<B, 2> {
        let data = self.values[rows.start * self.dim..rows.end * self.dim].to_vec();
        Tensor::from_data(TensorData::new(data, [rows.len(), self.dim]), device)
    }
}

/// The backbone's features of `images` ([N, C, H, W] floats, already transformed) in batches of
/// `batch` (the last partial batch kept), with batch norm in evaluation mode: call it with the
/// inner-backend module (`model.valid()`).
pub fn extract_features<B: LayerBackend>(
    backbone: &ResNet18<B>,
    images: &[f32],
    shape: [usize; 3],
    labels: &[u16],
    batch: usize,
    device: &B::Device,
) -> Result<Features> {
    let size: usize = shape.iter().product();
    if batch == 0 || size == 0 || images.len() != size * labels.len() {
        return Err(ClrError::invalid(
            "images to embed",
            format!("{} floats, batch {batch}", images.len()),
            format!("{} images of {shape:?} and a batch >= 1", labels.len()),
        ));
    }
    let mut values = Vec::with_capacity(labels.len() * backbone.features());
    for start in (0..labels.len()).step_by(batch) {
        let n = batch.min(labels.len() - start);
        let x = Tensor::<B, 4>::from_data(
            TensorData::new(
                images[start * size..(start + n) * size].to_vec(),
                [n, shape[0], shape[1], shape[2]],
            ),
            device,
        );
        let f = backbone.try_forward(x)?;
        // Read as f32 whatever the backend's float type (f64, f16, ...).
        values.extend(crate::manifold::read_floats(f, "backbone features")?);
    }
    Features::new(values, backbone.features(), labels.to_vec())
}

/// How spread a feature matrix's spectrum is (Roy and Vetterli): with the singular values
/// normalised to sum 1 (p_i), the entropy -sum p_i ln p_i and the effective rank exp(entropy),
/// between 1 (one direction) and the dimension (a flat spectrum). Both are reported because the
/// public code logs the entropy under the name of the rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spectrum {
    /// exp(entropy).
    pub effective_rank: f64,
    /// Entropy of the normalised singular values, in nats.
    pub entropy: f64,
    /// Stable rank sum sigma_i^2 / max sigma_i^2 (= ||Z||_F^2 / ||Z||_2^2), between 1 and the
    /// dimension; unlike the effective rank it is dominated by the largest directions.
    pub stable_rank: f64,
}

/// The [`Spectrum`] of the rows of `features` (not centred, as Roy and Vetterli define it), from
/// the eigenvalues of the d x d Gram matrix in f64; an error for an all-zero matrix.
///
/// ```
/// use manifoldclr::{Features, feature_spectrum};
///
/// // Two orthogonal rows of equal norm: two equal singular values, effective rank 2.
/// let f = Features::new(vec![3.0, 0.0, 0.0, 0.0, 3.0, 0.0], 3, vec![0, 1]).unwrap();
/// let s = feature_spectrum(&f).unwrap();
/// assert!((s.effective_rank - 2.0).abs() < 1e-9);
/// assert!((s.entropy - 2f64.ln()).abs() < 1e-9);
/// ```
pub fn feature_spectrum(features: &Features) -> Result<Spectrum> {
    spectrum(&features.values, features.dim)
}

/// The eigen-decomposition of a symmetric matrix, with a bound on the iterations (nalgebra's
/// default has none and can spin forever on a pathological matrix).
pub fn symmetric_eigen(
    m: nalgebra::DMatrix<f64>,
    what: &'static str,
) -> Result<nalgebra::SymmetricEigen<f64, nalgebra::Dyn>> {
    let n = m.nrows();
    nalgebra::SymmetricEigen::try_new(m, f64::EPSILON, 1000 * n.max(1)).ok_or_else(|| {
        ClrError::invalid(
            what,
            format!("a {n} x {n} eigenvalue iteration that did not converge"),
            "a well-conditioned symmetric matrix",
        )
    })
}

/// The [`Spectrum`] of a row-major matrix of `dim` columns (`values.len()` a multiple of `dim`).
///
/// ```
/// // Rows (1, 0) and (0, 2): singular values 1 and 2.
/// let s = manifoldclr::spectrum(&[1.0, 0.0, 0.0, 2.0], 2).unwrap();
/// assert!((s.stable_rank - 5.0 / 4.0).abs() < 1e-9);
/// ```
pub fn spectrum(values: &[f32], dim: usize) -> Result<Spectrum> {
    if dim == 0 || !values.len().is_multiple_of(dim) {
        return Err(ClrError::invalid(
            "features for the spectrum",
            format!("{} values", values.len()),
            format!("rows of {dim} values"),
        ));
    }
    if let Some(v) = values.iter().find(|v| !v.is_finite()) {
        return Err(ClrError::invalid(
            "features for the spectrum",
            v,
            "finite values",
        ));
    }
    let d = dim;
    let mut gram = nalgebra::DMatrix::<f64>::zeros(d, d);
    for row in values.chunks_exact(d) {
        for i in 0..d {
            let ri = row[i] as f64;
            for j in i..d {
                gram[(i, j)] += ri * row[j] as f64;
            }
        }
    }
    for i in 0..d {
        for j in 0..i {
            gram[(i, j)] = gram[(j, i)];
        }
    }
    let singular: Vec<f64> = symmetric_eigen(gram, "features for the spectrum")?
        .eigenvalues
        .iter()
        .map(|&l| l.max(0.0).sqrt())
        .collect();
    let total: f64 = singular.iter().sum();
    if total <= 0.0 {
        return Err(ClrError::invalid(
            "features for the spectrum",
            "an all-zero matrix",
            "at least one non-zero row",
        ));
    }
    let entropy: f64 = singular
        .iter()
        .map(|&s| s / total)
        .filter(|&p| p > 0.0)
        .map(|p| -p * p.ln())
        .sum();
    let largest = singular.iter().fold(0.0f64, |a, &s| a.max(s));
    Ok(Spectrum {
        effective_rank: entropy.exp(),
        entropy,
        stable_rank: singular.iter().map(|s| s * s).sum::<f64>() / (largest * largest),
    })
}

/// Top-1 and top-5 accuracy, in percent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Percent of rows whose best class is right.
    pub top1: f64,
    /// Percent of rows whose right class is among the best five.
    pub top5: f64,
}

fn accuracy<B: Backend>(scores: Tensor<B, 2>, labels: &[u16]) -> (usize, usize) {
    let classes = scores.dims()[1];
    let k = classes.min(5);
    let top = scores.sort_descending_with_indices(1).1.narrow(1, 0, k);
    let top: Vec<i64> = top
        .into_data()
        .convert::<i64>()
        .into_vec::<i64>()
        // Converted to i64 on the line above: the read cannot meet another type.
        .expect("indices converted to i64");
    let mut hits = (0, 0);
    for (row, &label) in top.chunks_exact(k).zip(labels) {
        let label = i64::from(label);
        hits.0 += usize::from(row[0] == label);
        hits.1 += usize::from(row.contains(&label));
    }
    hits
}

/// Cosine kNN: each test row votes among its `k` most similar training rows, a neighbour's vote
/// weighted by exp(similarity / 0.07) (the usual kNN monitor of contrastive learning).
pub fn knn<B: Backend>(
    train: &Features,
    test: &Features,
    classes: usize,
    k: usize,
    device: &B::Device,
) -> Result<Accuracy> {
    if train.dim != test.dim || k == 0 || k > train.len() || classes == 0 || test.is_empty() {
        return Err(ClrError::invalid(
            "kNN",
            format!(
                "train {} x {}, test {} x {}, k {k}, {classes} classes",
                train.len(),
                train.dim,
                test.len(),
                test.dim
            ),
            "features of one dimension, a non-empty test set and 1 <= k <= train rows",
        ));
    }
    let bank = unit_rows(train.tensor::<B>(0..train.len(), device)).transpose();
    let train_labels = Tensor::<B, 1, Int>::from_data(
        TensorData::new(
            train
                .labels
                .iter()
                .map(|&l| i64::from(l))
                .collect::<Vec<_>>(),
            [train.len()],
        ),
        device,
    );
    let mut hits = (0, 0);
    let chunk = 256;
    for start in (0..test.len()).step_by(chunk) {
        let n = chunk.min(test.len() - start);
        let q = unit_rows(test.tensor::<B>(start..start + n, device));
        let (sims, idx) = q.matmul(bank.clone()).topk_with_indices(k, 1);
        let weights = (sims / 0.07).exp();
        let neighbour_labels = train_labels
            .clone()
            .select(0, idx.reshape([n * k]))
            .reshape([n, k]);
        let votes = Tensor::<B, 2>::zeros([n, classes], device).scatter(
            1,
            neighbour_labels,
            weights,
            burn::tensor::IndexingUpdateOp::Add,
        );
        let h = accuracy(votes, &test.labels[start..start + n]);
        hits = (hits.0 + h.0, hits.1 + h.1);
    }
    let pct = |h: usize| 100.0 * h as f64 / test.len() as f64;
    Ok(Accuracy {
        top1: pct(hits.0),
        top5: pct(hits.1),
    })
}

/// Settings of the linear probe (protocol: Adam, lr 1e-2 decayed exponentially per epoch to
/// 1e-5, batch 1000, weight decay 5e-6, 500 epochs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeConfig {
    /// Epochs over the training features.
    pub epochs: usize,
    /// Learning rate of the first epoch.
    pub lr: f64,
    /// Learning rate of the last epoch.
    pub final_lr: f64,
    /// Rows per step.
    pub batch_size: usize,
    /// Adam's (L2) weight decay.
    pub weight_decay: f64,
    /// Seed of the shuffles.
    pub seed: u64,
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above, implemented by hand: Burn's
/// derive drops the serde field attributes that let a TOML run config leave settings out.
impl burn::config::Config for ProbeConfig {}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            epochs: 500,
            lr: 1e-2,
            final_lr: 1e-5,
            batch_size: 1000,
            weight_decay: 5e-6,
            seed: 0,
        }
    }
}

/// Trains one linear layer on `train` and returns its accuracy on `test`.
pub fn linear_probe<B: AutodiffBackend>(
    train: &Features,
    test: &Features,
    classes: usize,
    config: &ProbeConfig,
    device: &B::Device,
) -> Result<Accuracy> {
    let mut each = linear_probe_each::<B>(train, &[test], classes, config, device)?;
    Ok(each.remove(0))
}

/// Trains one linear layer on `train` and returns its accuracy on each of `tests` (the same
/// probe scores clean and transformed test features alike).
pub fn linear_probe_each<B: AutodiffBackend>(
    train: &Features,
    tests: &[&Features],
    classes: usize,
    config: &ProbeConfig,
    device: &B::Device,
) -> Result<Vec<Accuracy>> {
    if classes == 0 || tests.is_empty() {
        return Err(ClrError::invalid(
            "probe",
            format!("{classes} classes, {} test sets", tests.len()),
            "at least one class and one test set",
        ));
    }
    if let Some(test) = tests
        .iter()
        .find(|t| t.dim != train.dim || t.is_empty())
        .or(tests.first().filter(|_| train.is_empty()))
    {
        return Err(ClrError::invalid(
            "probe features",
            format!(
                "train {} x {}, test {} x {}",
                train.len(),
                train.dim,
                test.len(),
                test.dim
            ),
            "non-empty sets of one dimension",
        ));
    }
    if config.epochs == 0 || config.batch_size == 0 || !(config.lr > 0.0 && config.final_lr > 0.0) {
        return Err(ClrError::invalid(
            "probe settings",
            format!("{config:?}"),
            "epochs and batch >= 1, learning rates > 0",
        ));
    }
    let mut layer: Linear<B> = crate::seeded::<B, _>(device, config.seed, || {
        crate::materialised(LinearConfig::new(train.dim, classes).init(device))
    });
    let mut optim = AdamConfig::new()
        .with_epsilon(1e-8)
        .with_weight_decay(Some(WeightDecayConfig::new(config.weight_decay as f32)))
        .init::<B, Linear<B>>();
    let gamma = if config.epochs > 1 {
        (config.final_lr / config.lr).powf(1.0 / (config.epochs - 1) as f64)
    } else {
        1.0
    };
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut rng = StreamRng::seed_from_u64(config.seed);
    for epoch in 0..config.epochs {
        let lr = config.lr * gamma.powi(epoch as i32);
        order.shuffle(&mut rng);
        for rows in order.chunks(config.batch_size) {
            let x: Vec<f32> = rows
                .iter()
                .flat_map(|&r| {
                    train.values[r * train.dim..(r + 1) * train.dim]
                        .iter()
                        .copied()
                })
                .collect();
            let y: Vec<i64> = rows.iter().map(|&r| i64::from(train.labels[r])).collect();
            let x = Tensor::<B, 2>::from_data(TensorData::new(x, [rows.len(), train.dim]), device);
            let y = Tensor::<B, 1, Int>::from_data(TensorData::new(y, [rows.len()]), device);
            let loss = loss_fn.forward(layer.forward(x), y);
            let grads = GradientsParams::from_grads(loss.backward(), &layer);
            layer = optim.step(lr, layer, grads);
        }
    }
    let layer = layer.valid();
    let score = |test: &Features| {
        let mut hits = (0, 0);
        for start in (0..test.len()).step_by(config.batch_size) {
            let n = config.batch_size.min(test.len() - start);
            let logits = layer.forward(test.tensor::<B::InnerBackend>(start..start + n, device));
            let h = accuracy(logits, &test.labels[start..start + n]);
            hits = (hits.0 + h.0, hits.1 + h.1);
        }
        let pct = |h: usize| 100.0 * h as f64 / test.len() as f64;
        Accuracy {
            top1: pct(hits.0),
            top5: pct(hits.1),
        }
    };
    Ok(tests.iter().map(|t| score(t)).collect())
}
