//! Semi-supervised classification on frozen features with few labels, where the learned prior's
//! samples augment the unlabelled features (the paper's Section 5.3, Table 2; `docs/semisup.md`).
//!
//! A classifier r: d -> hidden -> LeakyReLU -> C trains on B_l labelled and B_u unlabelled
//! features per iteration with
//!
//! L = CE(r(z_l), y) + (1/N_u) sum_b 1[max q_b >= tau] CE(r(z~_b), argmax q_b),
//! q_b = softmax(r(z_u,b)) (no gradient), N_u the count of confident rows (no term when 0),
//!
//! where z~ is what the method makes of z_u ([`SemisupMethod`]). AdamW at a fixed learning rate;
//! the test accuracy is that of an exponential moving average of the classifier's weights.
//! Several label splits train at once in batched parameters (one matrix product per layer for
//! all of them); each split draws from its own streams, so a split's result does not depend on
//! which splits trained beside it.
//!
//! ```
//! use burn::backend::{Autodiff, NdArray};
//! use manifoldclr::Features;
//! use manifoldclr::semisup::{SemisupConfig, SemisupMethod, SemisupSet, train_splits};
//!
//! // Two well separated classes in 4 dimensions.
//! let rows = |n: usize| -> Features {
//!     let labels: Vec<u16> = (0..n).map(|i| (i % 2) as u16).collect();
//!     let values = labels.iter().flat_map(|&l| {
//!         let s = if l == 0 { 1.0 } else { -1.0 };
//!         [s, 0.5 * s, 0.1, -0.1]
//!     }).collect();
//!     Features::new(values, 4, labels).unwrap()
//! };
//! let (train, test) = (rows(40), rows(10));
//! let set = SemisupSet::new(&train, &test, 2).unwrap();
//! let config = SemisupConfig {
//!     labelled_batch: 4, unlabelled_batch: 8, hidden: 16, iterations: 60, lr: 1e-2,
//!     ema_decay: 0.5, // a short average for a short run (the paper's is 0.999 over 5000)
//!     ..SemisupConfig::default()
//! };
//! let out = train_splits::<Autodiff<NdArray>>(
//!     SemisupMethod::PseudoLabel, &config, &set, 2, &[0, 1], None, &Default::default(),
//!     &mut |_| {},
//! ).unwrap();
//! assert_eq!(out.len(), 2);
//! assert!(out.iter().all(|o| o.accuracy == 100.0));
//! ```

mod classifier;
mod featmatch;
mod loss;
mod prior;
mod splits;

use std::fmt;
use std::str::FromStr;

use burn::module::Module;
use burn::optim::{GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::activation::softmax;
use rand::Rng;
use serde::{Deserialize, Serialize};
use vlgo_core::layers::{FusedAdamWConfig, LayerBackend};

pub use classifier::{EmaMlp, SplitMlp};
pub use featmatch::FeatMatchAttention;
pub use loss::{confidence_weights, mean_square_per_split, mix, weighted_cross_entropy};
pub use prior::{PriorAugment, transport_features};
pub use splits::label_split;

use crate::error::{ClrError, Result};
use crate::eval::Features;
use splits::{Purpose, stream};

/// The semi-supervised methods (the paper's Table 2 rows), by their fixed names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SemisupMethod {
    /// `ce-only`: the labelled term alone.
    #[serde(rename = "ce-only")]
    CeOnly,
    /// `pseudo-label`: z~ = z_u.
    #[serde(rename = "pseudo-label")]
    PseudoLabel,
    /// `mm-ict`: Manifold-Mixup ICT. z~ = l z_u + (1 - l) z_u', l ~ U(0, 1) per row; the term is
    /// the mean squared difference between softmax(r(z~)) and l softmax(EMA(z_u)) + (1 - l)
    /// softmax(EMA(z_u')) (no confidence mask).
    #[serde(rename = "mm-ict")]
    MmIct,
    /// `featmatch`: z~ from the attention module ([`FeatMatchAttention`]), trained jointly.
    #[serde(rename = "featmatch")]
    FeatMatch,
    /// `vlgo`: z~ = T(c~) z_u with c~ drawn from the learned prior p(c | z_u), threshold off, no
    /// gradient into the operators or the prior.
    #[serde(rename = "vlgo")]
    Vlgo,
}

impl SemisupMethod {
    /// Every method, in the table's order.
    pub const ALL: [SemisupMethod; 5] = [
        SemisupMethod::CeOnly,
        SemisupMethod::PseudoLabel,
        SemisupMethod::MmIct,
        SemisupMethod::FeatMatch,
        SemisupMethod::Vlgo,
    ];

    /// The method's fixed name.
    pub fn name(self) -> &'static str {
        match self {
            SemisupMethod::CeOnly => "ce-only",
            SemisupMethod::PseudoLabel => "pseudo-label",
            SemisupMethod::MmIct => "mm-ict",
            SemisupMethod::FeatMatch => "featmatch",
            SemisupMethod::Vlgo => "vlgo",
        }
    }

    /// Whether the method uses the confident pseudo-label term.
    fn pseudo_labels(self) -> bool {
        matches!(
            self,
            SemisupMethod::PseudoLabel | SemisupMethod::FeatMatch | SemisupMethod::Vlgo
        )
    }
}

impl fmt::Display for SemisupMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SemisupMethod {
    type Err = ClrError;

    fn from_str(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|m| m.name()).collect();
                ClrError::invalid(
                    "semi-supervised method",
                    s,
                    format!("one of {}", names.join(", ")),
                )
            })
    }
}

/// Settings of the semi-supervised trainer (`[semisup]` of a run's config). The defaults are the
/// paper's (Appendix; the published code where the paper is silent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SemisupConfig {
    /// Labelled rows per iteration, B_l (all of them when the split has fewer).
    pub labelled_batch: usize,
    /// Unlabelled rows per iteration, B_u.
    pub unlabelled_batch: usize,
    /// The classifier's hidden width.
    pub hidden: usize,
    /// LeakyReLU's negative slope (PyTorch's default).
    pub negative_slope: f64,
    /// AdamW's fixed learning rate.
    pub lr: f64,
    /// AdamW's (decoupled) weight decay.
    pub weight_decay: f64,
    /// Iterations of every method but FeatMatch.
    pub iterations: usize,
    /// FeatMatch's iterations; 0 for twice `iterations` (the paper's 10,000 to 5,000).
    pub featmatch_iterations: usize,
    /// Confidence threshold tau of the pseudo-labels (0.7 for TinyImageNet in the paper).
    pub confidence: f64,
    /// Decay of the weights' moving average that scores the test set.
    pub ema_decay: f64,
    /// FeatMatch's attention heads.
    pub featmatch_heads: usize,
    /// Dropout on FeatMatch's attention weights.
    pub featmatch_dropout: f64,
    /// Seed of the label splits and of every draw (split s of k labels per class is keyed by
    /// (seed, k, s)).
    pub seed: u64,
    /// Label splits trained at once in batched parameters (a speed setting: results do not
    /// depend on it). 1 on CPU backends, where batching measured slower per split
    /// (`docs/semisup.md`, "Speed"); more for a GPU.
    pub splits_at_once: usize,
}

/// Burn's `Config` (JSON `save` / `load`) over the serde form above, implemented by hand: Burn's
/// derive drops the serde field attributes that let a TOML run config leave settings out.
impl burn::config::Config for SemisupConfig {}

impl Default for SemisupConfig {
    fn default() -> Self {
        Self {
            labelled_batch: 32,
            unlabelled_batch: 480,
            hidden: 2048,
            negative_slope: 0.01,
            lr: 5e-4,
            weight_decay: 5e-4,
            iterations: 5000,
            featmatch_iterations: 0,
            confidence: 0.95,
            ema_decay: 0.999,
            featmatch_heads: 4,
            featmatch_dropout: 0.1,
            seed: 0,
            splits_at_once: 1,
        }
    }
}

impl SemisupConfig {
    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("semisup.labelled_batch", self.labelled_batch),
            ("semisup.unlabelled_batch", self.unlabelled_batch),
            ("semisup.hidden", self.hidden),
            ("semisup.iterations", self.iterations),
            ("semisup.featmatch_heads", self.featmatch_heads),
            ("semisup.splits_at_once", self.splits_at_once),
        ] {
            if v == 0 {
                return Err(ClrError::invalid(name, 0, "at least 1"));
            }
        }
        let unit = |name: &'static str, v: f64, open_top: bool| {
            let ok = v >= 0.0 && (v < 1.0 || (!open_top && v <= 1.0));
            match ok {
                true => Ok(()),
                false => Err(ClrError::invalid(
                    name,
                    v,
                    if open_top { "in [0, 1)" } else { "in [0, 1]" },
                )),
            }
        };
        unit("semisup.confidence", self.confidence, false)?;
        unit("semisup.ema_decay", self.ema_decay, true)?;
        unit("semisup.featmatch_dropout", self.featmatch_dropout, true)?;
        for (name, v) in [
            ("semisup.lr", self.lr),
            ("semisup.weight_decay", self.weight_decay),
            ("semisup.negative_slope", self.negative_slope),
        ] {
            if !(v.is_finite() && v >= 0.0) || (name == "semisup.lr" && v == 0.0) {
                return Err(ClrError::invalid(name, v, "finite and >= 0 (lr > 0)"));
            }
        }
        Ok(())
    }

    /// Iterations of `method`.
    pub fn iterations_of(&self, method: SemisupMethod) -> usize {
        match method {
            SemisupMethod::FeatMatch => match self.featmatch_iterations {
                0 => 2 * self.iterations,
                n => n,
            },
            _ => self.iterations,
        }
    }
}

/// Frozen training and test features with their classes: what every split trains on.
#[derive(Debug, Clone, Copy)]
pub struct SemisupSet<'a> {
    /// Training features (labels used only for the labelled rows of a split).
    pub train: &'a Features,
    /// Test features.
    pub test: &'a Features,
    /// Number of classes.
    pub classes: usize,
}

impl<'a> SemisupSet<'a> {
    /// Checks that both sets share a dimension, are non-empty and label within `classes`.
    pub fn new(train: &'a Features, test: &'a Features, classes: usize) -> Result<Self> {
        if train.dim != test.dim || train.is_empty() || test.is_empty() || classes < 2 {
            return Err(ClrError::invalid(
                "semi-supervised features",
                format!(
                    "train {} x {}, test {} x {}, {classes} classes",
                    train.len(),
                    train.dim,
                    test.len(),
                    test.dim
                ),
                "non-empty sets of one dimension and at least 2 classes",
            ));
        }
        let high = |f: &Features| {
            f.labels
                .iter()
                .copied()
                .find(|&l| usize::from(l) >= classes)
        };
        if let Some(l) = high(train).or_else(|| high(test)) {
            return Err(ClrError::invalid(
                "label",
                l,
                format!("a class below {classes}"),
            ));
        }
        Ok(Self {
            train,
            test,
            classes,
        })
    }
}

/// One split's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitOutcome {
    /// The split's number.
    pub split: u64,
    /// Test top-1 accuracy (%) of the weights' moving average after the last iteration.
    pub accuracy: f64,
    /// Mean over iterations of N_u / B_u, for the methods with pseudo-labels.
    pub confident_fraction: Option<f64>,
    /// Iterations trained.
    pub iterations: usize,
}

/// The classifier and, for FeatMatch, the attention module: what the optimiser updates.
#[derive(Module, Debug)]
struct Trainable<B: Backend> {
    classifier: SplitMlp<B>,
    attention: Option<FeatMatchAttention<B>>,
}

/// A split's rows and streams.
struct SplitState {
    labelled: Vec<usize>,
    unlabelled: Vec<usize>,
    batches: vlgo_core::StreamRng,
    draws: vlgo_core::StreamRng,
}

/// Rows `rows` of `features`, gathered into `out`.
fn gather(features: &Features, rows: &[usize], out: &mut Vec<f32>) {
    for &r in rows {
        out.extend_from_slice(&features.values[r * features.dim..(r + 1) * features.dim]);
    }
}

fn tensor3<B: Backend>(values: Vec<f32>, shape: [usize; 3], device: &B::Device) -> Tensor<B, 3> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap_or_else(|e| unreachable!("a float tensor converts to f32: {e:?}"))
}

/// Trains `method` on the label splits `splits` of `per_class` labels per class, all at once, and
/// scores each split's averaged classifier on the test set. `prior` is required by
/// [`SemisupMethod::Vlgo`] and ignored by the others; `progress` hears the iterations done (every
/// 50 and at the end).
#[allow(clippy::too_many_arguments)]
pub fn train_splits<B>(
    method: SemisupMethod,
    config: &SemisupConfig,
    set: &SemisupSet<'_>,
    per_class: usize,
    splits: &[u64],
    prior: Option<&PriorAugment<'_, B::InnerBackend>>,
    device: &B::Device,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<SplitOutcome>>
where
    B: crate::TrainBackend,
{
    let trained = train_with_average::<B>(
        method, config, set, per_class, splits, prior, device, progress,
    )?;
    Ok(trained.0)
}

/// [`train_splits`], also returning the averaged classifier.
#[allow(clippy::too_many_arguments)]
fn train_with_average<B>(
    method: SemisupMethod,
    config: &SemisupConfig,
    set: &SemisupSet<'_>,
    per_class: usize,
    splits: &[u64],
    prior: Option<&PriorAugment<'_, B::InnerBackend>>,
    device: &B::Device,
    progress: &mut dyn FnMut(usize),
) -> Result<(Vec<SplitOutcome>, EmaMlp<B::InnerBackend>)>
where
    B: crate::TrainBackend,
{
    config.validate()?;
    if splits.is_empty() {
        return Err(ClrError::invalid(
            "label splits",
            "none",
            "at least one split",
        ));
    }
    let prior = match (method, prior) {
        (SemisupMethod::Vlgo, None) => {
            return Err(ClrError::invalid(
                "semi-supervised method",
                "vlgo without a learned prior",
                "a run with a learned prior (ManifoldCLR) for the vlgo method",
            ));
        }
        (SemisupMethod::Vlgo, Some(p)) => Some(p),
        _ => None,
    };
    let (train, d, c) = (set.train, set.train.dim, set.classes);
    if let Some(p) = prior
        && p.dims() > d
    {
        return Err(ClrError::invalid(
            "prior",
            format!("operators on {} features", p.dims()),
            format!("at most the features' {d}"),
        ));
    }
    let s = splits.len();
    let mut states = Vec::with_capacity(s);
    let mut init_rngs = Vec::with_capacity(s);
    for &split in splits {
        let labelled = label_split(&train.labels, c, per_class, config.seed, split)?;
        let unlabelled = splits::unlabelled_rows(train.len(), &labelled);
        if unlabelled.len() < config.unlabelled_batch {
            return Err(ClrError::invalid(
                "semisup.unlabelled_batch",
                config.unlabelled_batch,
                format!("at most the {} unlabelled training rows", unlabelled.len()),
            ));
        }
        states.push(SplitState {
            labelled,
            unlabelled,
            batches: stream(config.seed, per_class, split, Purpose::Batches),
            draws: stream(config.seed, per_class, split, Purpose::Method),
        });
        init_rngs.push(stream(config.seed, per_class, split, Purpose::Init));
    }
    let bl = config.labelled_batch.min(per_class * c);
    let bu = config.unlabelled_batch;
    let classifier = SplitMlp::init(
        &mut init_rngs,
        [d, config.hidden, c],
        config.negative_slope,
        device,
    );
    let attention = match method {
        SemisupMethod::FeatMatch => Some(FeatMatchAttention::init(
            &mut init_rngs,
            d,
            config.featmatch_heads,
            device,
        )?),
        _ => None,
    };
    let mut model = Trainable {
        classifier,
        attention,
    };
    let mut ema = EmaMlp::new(model.classifier.inner_weights(), config.negative_slope);
    // Burn's AdamW arithmetic in one pass per parameter (a tenth of a step on the CPU).
    let mut optim = FusedAdamWConfig::new()
        .with_epsilon(1e-8)
        .with_weight_decay(config.weight_decay as f32)
        .init::<B, Trainable<B>>();
    let iterations = config.iterations_of(method);
    let mut confident = vec![0.0f64; s];
    for it in 0..iterations {
        let (mut xl, mut yl, mut xu) = (Vec::new(), vec![0.0f32; s * bl * c], Vec::new());
        for (j, st) in states.iter_mut().enumerate() {
            let lrows = splits::batch(&mut st.batches, &st.labelled, bl);
            let urows = splits::batch(&mut st.batches, &st.unlabelled, bu);
            gather(train, &lrows, &mut xl);
            gather(train, &urows, &mut xu);
            for (i, &r) in lrows.iter().enumerate() {
                yl[(j * bl + i) * c + usize::from(train.labels[r])] = 1.0 / bl as f32;
            }
        }
        let xl = tensor3::<B>(xl, [s, bl, d], device);
        let xu = tensor3::<B>(xu, [s, bu, d], device);
        let yl = tensor3::<B>(yl, [s, bl, c], device);
        // The labelled rows and the (augmented) unlabelled rows go through the classifier as
        // one batch: one product per layer instead of a small and a large one.
        let (logits_l, unlabelled_loss) = match method {
            SemisupMethod::CeOnly => (model.classifier.forward(xl.clone()), None),
            SemisupMethod::PseudoLabel | SemisupMethod::Vlgo | SemisupMethod::FeatMatch => {
                let augmented = match method {
                    SemisupMethod::Vlgo => {
                        let prior = prior.unwrap_or_else(|| unreachable!("checked above"));
                        let z = xu.clone().inner().reshape([s * bu, d]);
                        let m = prior.coefficients();
                        let u: Vec<f32> = states
                            .iter_mut()
                            .flat_map(|st| {
                                (0..bu * m)
                                    .map(|_| st.draws.random::<f32>() - 0.5)
                                    .collect::<Vec<_>>()
                            })
                            .collect();
                        let u = Tensor::from_data(TensorData::new(u, [s * bu, m]), device);
                        let moved = prior.apply(prior.sample(z.clone(), u)?, z)?;
                        Tensor::from_inner(moved.reshape([s, bu, d]))
                    }
                    SemisupMethod::FeatMatch => {
                        let attention = model
                            .attention
                            .as_ref()
                            .unwrap_or_else(|| unreachable!("FeatMatch builds its attention"));
                        let h = config.featmatch_heads;
                        let p = config.featmatch_dropout;
                        let keep: Vec<f32> = states
                            .iter_mut()
                            .flat_map(|st| {
                                splits::uniform(&mut st.draws, h * bu * bl)
                                    .into_iter()
                                    .map(|x| match f64::from(x) < p {
                                        true => 0.0,
                                        false => (1.0 / (1.0 - p)) as f32,
                                    })
                                    .collect::<Vec<_>>()
                            })
                            .collect();
                        let keep = Tensor::from_data(TensorData::new(keep, [s, h, bu, bl]), device);
                        attention.forward(xu.clone(), xl.clone(), Some(keep))
                    }
                    _ => xu.clone(),
                };
                let (logits_l, logits_aug) = joint(&model.classifier, xl.clone(), augmented);
                // q from the current classifier on the plain unlabelled features, no gradient.
                let q = match method {
                    SemisupMethod::PseudoLabel => logits_aug.clone().detach().inner(),
                    _ => model.classifier.logits_without_grad(xu.clone().inner()),
                };
                let q = host(softmax(q, 2));
                let (weights, counts) = confidence_weights(&q, s, bu, c, config.confidence);
                for (acc, n) in confident.iter_mut().zip(&counts) {
                    *acc += *n as f64 / bu as f64;
                }
                let weights = tensor3::<B>(weights, [s, bu, c], device);
                (logits_l, Some(weighted_cross_entropy(logits_aug, weights)))
            }
            SemisupMethod::MmIct => {
                let mut partners = Vec::with_capacity(s * bu * d);
                let mut lambdas = Vec::with_capacity(s * bu);
                for st in states.iter_mut() {
                    let rows = splits::batch(&mut st.draws, &st.unlabelled, bu);
                    gather(train, &rows, &mut partners);
                    lambdas.extend(splits::uniform(&mut st.draws, bu));
                }
                let partners = tensor3::<B>(partners, [s, bu, d], device);
                let l = tensor3::<B>(lambdas, [s, bu, 1], device);
                let target = mix(
                    softmax(ema.forward(xu.clone().inner()), 2),
                    softmax(ema.forward(partners.clone().inner()), 2),
                    l.clone().inner(),
                );
                let mixed = mix(xu, partners, l);
                let (logits_l, logits_mixed) = joint(&model.classifier, xl.clone(), mixed);
                let p = softmax(logits_mixed, 2);
                let term = mean_square_per_split(p, Tensor::from_inner(target));
                (logits_l, Some(term))
            }
        };
        let mut loss = weighted_cross_entropy(logits_l, yl);
        if let Some(term) = unlabelled_loss {
            loss = loss + term;
        }
        let value = f64::from(loss.clone().into_scalar().to_f32());
        if !value.is_finite() {
            return Err(ClrError::Diverged {
                epoch: 1,
                step: it + 1,
                what: "semi-supervised loss",
                value,
            });
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(config.lr, model, grads);
        ema.update(model.classifier.inner_weights(), config.ema_decay);
        if (it + 1) % 50 == 0 || it + 1 == iterations {
            progress(it + 1);
        }
    }
    let accuracy = test_accuracy(&ema, set.test, s, device);
    let outcomes = splits
        .iter()
        .enumerate()
        .map(|(j, &split)| SplitOutcome {
            split,
            accuracy: accuracy[j],
            confident_fraction: method
                .pseudo_labels()
                .then(|| confident[j] / iterations as f64),
            iterations,
        })
        .collect();
    Ok((outcomes, ema))
}

/// The logits of the labelled rows `xl` [S, B_l, d] and of `other` [S, n, d], from one pass of
/// the classifier over both.
fn joint<B: LayerBackend>(
    classifier: &SplitMlp<B>,
    xl: Tensor<B, 3>,
    other: Tensor<B, 3>,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let (bl, n) = (xl.dims()[1], other.dims()[1]);
    let logits = classifier.forward(Tensor::cat(vec![xl, other], 1));
    (logits.clone().narrow(1, 0, bl), logits.narrow(1, bl, n))
}

/// Each split's top-1 accuracy (%) on `test` under the averaged weights.
fn test_accuracy<B: LayerBackend>(
    ema: &EmaMlp<B>,
    test: &Features,
    splits: usize,
    device: &B::Device,
) -> Vec<f64> {
    const ROWS: usize = 5000;
    let mut hits = vec![0usize; splits];
    for start in (0..test.len()).step_by(ROWS) {
        let end = (start + ROWS).min(test.len());
        let x = test.tensor::<B>(start..end, device);
        for (j, h) in hits.iter_mut().enumerate() {
            let predicted = ema.forward_split(j, x.clone()).argmax(1);
            let predicted: Vec<i64> = predicted
                .into_data()
                .convert::<i64>()
                .to_vec::<i64>()
                .unwrap_or_else(|e| unreachable!("int indices: {e:?}"));
            *h += predicted
                .iter()
                .zip(&test.labels[start..end])
                .filter(|(p, l)| **p == i64::from(**l))
                .count();
        }
    }
    hits.into_iter()
        .map(|h| 100.0 * h as f64 / test.len() as f64)
        .collect()
}

#[cfg(test)]
mod tests;
