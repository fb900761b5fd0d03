//! `vlgo identity`, `vlgo coefficients`, `vlgo neighbours` and `vlgo paths`: what the operators
//! and the learned prior of a trained ManifoldCLR run do to test features, written into the run
//! folder (`docs/manifoldclr.md`).
//!
//! Every command opens the run's last checkpoint with the settings of its `config.toml`; its
//! `[diagnostics]` table (defaults when absent, see [`DiagnosticsConfig`]) sets how many images,
//! samples and generators are shown. Prior samples are thresholded as in training and drawn from
//! the fully warmed prior, as downstream use draws them.

pub mod coefficients;
pub mod identity;
pub mod neighbours;
pub mod paths;

use std::path::Path;

use burn::module::AutodiffModule;
use burn::prelude::*;
use manifoldclr::vlgo_nn::Vlgo;
use manifoldclr::{ContrastiveModel, Features, Pretrainer, TrainBackend};
use vlgo_core::{NoiseStreams, sample};

use crate::error::{CliError, Result};
pub use crate::pretrain::DiagnosticsConfig;
use crate::pretrain::data::{ImageData, has_checkpoint};
use crate::pretrain::{ImageRunConfig, embed};
use crate::run_folder::RunFolder;

/// The four diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Diagnostic {
    /// Linear probe on clean and transported test features.
    Identity,
    /// Per-class mean |c| of prior samples.
    Coefficients,
    /// Prior samples shown as their nearest training images.
    Neighbours,
    /// Paths expm(t Psi_m) z of the largest generators.
    Paths,
}

impl Diagnostic {
    /// Every diagnostic, by its command name.
    pub const ALL: [(&'static str, Diagnostic); 4] = [
        ("identity", Diagnostic::Identity),
        ("coefficients", Diagnostic::Coefficients),
        ("neighbours", Diagnostic::Neighbours),
        ("paths", Diagnostic::Paths),
    ];

    /// The diagnostic of a command name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
    }
}

/// Where prior coefficients come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorKind {
    /// The learned prior p(c | z), fully warmed.
    Learned,
    /// The fixed Laplace(shift_prior, scale_prior).
    Fixed,
}

/// A trained run with operators, opened for diagnostics.
pub struct ManifoldRun<B: TrainBackend> {
    /// The run's resolved settings.
    pub config: ImageRunConfig,
    /// Its data.
    pub data: ImageData,
    /// The run folder, where the diagnostics write.
    pub folder: RunFolder,
    /// The trained model in evaluation mode.
    pub model: ContrastiveModel<B::InnerBackend>,
    device: B::Device,
}

impl<B: TrainBackend> ManifoldRun<B> {
    /// Opens `run`: its config, data and last checkpoint; an error for a run without operators.
    pub fn open(run: &Path, device: &B::Device) -> Result<Self> {
        let config = ImageRunConfig::load(&run.join("config.toml"))?;
        config.validate()?;
        let method = config.pretrain.model.method;
        if !method.uses_operators() {
            return Err(CliError::invalid(
                "--run",
                format!("{} (method {method})", run.display()),
                "a run of a method with operators: manifoldclr-mlp, manifoldclr or \
                 manifold-directclr",
            ));
        }
        let data = ImageData::open(&config)?;
        let checkpoints = run.join("checkpoints");
        if !has_checkpoint(&checkpoints) {
            return Err(CliError::invalid(
                "--run",
                run.display(),
                "a run folder with a checkpoint (checkpoints/state.json)",
            ));
        }
        let trainer = Pretrainer::<B>::resume(config.pretrain.clone(), &checkpoints, device)?;
        Ok(Self {
            model: trainer.model.valid(),
            folder: RunFolder::existing(run)?,
            config,
            data,
            device: device.clone(),
        })
    }

    /// The operators, encoder and prior.
    pub fn vlgo(&self) -> &Vlgo<B::InnerBackend> {
        self.model
            .vlgo
            .as_ref()
            .unwrap_or_else(|| unreachable!("`open` admits only runs with operators"))
    }

    /// The device the run evaluates on.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// Clean features of a set under the evaluation transform.
    pub fn embed(&self, set: &vlgo_datasets::ImageSet) -> Result<Features> {
        embed(
            &self.model.backbone,
            set,
            &self.data,
            &self.config,
            &self.device,
        )
    }

    /// Features the operators act on: the first S b of them (all but for the direct method).
    pub fn operator_dims(&self) -> usize {
        let (s, b) = self.vlgo().operators.blocks();
        s * b
    }

    /// Rows `rows` of `features` as a tensor.
    pub fn rows(
        &self,
        features: &Features,
        rows: std::ops::Range<usize>,
    ) -> Tensor<B::InnerBackend, 2> {
        features.tensor(rows, &self.device)
    }

    /// One thresholded coefficient sample per row of `z` ([N, d]) from the `kind` prior, with
    /// noise keyed by (`key`, `stream`) under the diagnostics seed.
    pub fn prior_sample(
        &self,
        z: Tensor<B::InnerBackend, 2>,
        kind: PriorKind,
        key: u64,
        stream: u64,
    ) -> Result<Tensor<B::InnerBackend, 2>> {
        let vlgo = self.vlgo();
        let z = z.narrow(1, 0, self.operator_dims());
        let params = match kind {
            PriorKind::Learned => vlgo.try_prior_params(z)?,
            PriorKind::Fixed => vlgo.try_fixed_params(&z)?,
        };
        let [n, m] = params.dims();
        let u =
            NoiseStreams::new(self.config.diagnostics.seed).uniform_centered(key, stream, n * m);
        let u =
            Tensor::<B::InnerBackend, 1>::from_floats(u.as_slice(), &self.device).reshape([n, m]);
        Ok(sample(&params, u, &vlgo.threshold))
    }

    /// T(c) z on the operators' features, the other features unchanged.
    pub fn transport(
        &self,
        c: Tensor<B::InnerBackend, 2>,
        z: Tensor<B::InnerBackend, 2>,
    ) -> Result<Tensor<B::InnerBackend, 2>> {
        Ok(manifoldclr::semisup::transport_features(self.vlgo(), c, z)?)
    }

    /// Every row of `features` moved by one sample of the `kind` prior (in batches of the
    /// run's `eval_batch`).
    pub fn moved(&self, features: &Features, kind: PriorKind, stream: u64) -> Result<Features> {
        let mut values = Vec::with_capacity(features.values.len());
        for start in (0..features.len()).step_by(self.config.eval_batch) {
            let end = (start + self.config.eval_batch).min(features.len());
            let z = self.rows(features, start..end);
            let c = self.prior_sample(z.clone(), kind, start as u64, stream)?;
            values.extend(host(self.transport(c, z)?)?);
        }
        Ok(Features::new(
            values,
            features.dim,
            features.labels.clone(),
        )?)
    }
}

/// The first image of each class in label order, at most `count` of them.
pub fn first_of_each_class(set: &vlgo_datasets::ImageSet, count: usize) -> Vec<usize> {
    (0..set.classes.len())
        .filter_map(|k| set.labels.iter().position(|&l| usize::from(l) == k))
        .take(count)
        .collect()
}

/// The Euclidean norm of `values`.
pub fn l2(values: impl Iterator<Item = f64>) -> f64 {
    values.map(|x| x * x).sum::<f64>().sqrt()
}

/// A tensor's values on the host.
pub fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Result<Vec<f32>> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .map_err(|e| CliError::invalid("tensor", format!("{e:?}"), "f32 values"))
}

/// Runs `what` on the run folder `run` and returns what it wrote to its JSON file.
pub fn run<B: TrainBackend>(
    run: &Path,
    what: Diagnostic,
    device: &B::Device,
) -> Result<serde_json::Value> {
    let r = ManifoldRun::<B>::open(run, device)?;
    match what {
        Diagnostic::Identity => identity::identity(&r),
        Diagnostic::Coefficients => coefficients::coefficients(&r),
        Diagnostic::Neighbours => neighbours::neighbours(&r),
        Diagnostic::Paths => paths::paths(&r),
    }
}
