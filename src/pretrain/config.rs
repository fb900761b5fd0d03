//! Settings of an image pre-training run (`configs/<dataset>-<method>[-cpu].toml`).

use std::path::PathBuf;

use manifoldclr::semisup::SemisupConfig;
use manifoldclr::{PretrainConfig, ProbeConfig};
use serde::{Deserialize, Serialize};

use crate::error::{CliError, Result};

/// The data sets `vlgo pretrain` reads.
pub const DATASETS: [&str; 4] = ["cifar10", "stl10", "tinyimagenet", "fashion-mnist"];

/// Everything a pre-training run and its evaluation need; the resolved copy is the run folder's
/// `config.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageRunConfig {
    /// `cifar10`, `stl10`, `tinyimagenet` or `fashion-mnist`.
    pub dataset: String,
    /// The data set's folder (`--data-dir`); for Fashion-MNIST the Debian package's folder when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Side of the augmented views.
    pub image_size: usize,
    /// Use only the first this many training images (0: all), for quick runs.
    #[serde(default)]
    pub train_limit: usize,
    /// Use only the first this many test images (0: all), for quick runs.
    #[serde(default)]
    pub test_limit: usize,
    /// The training loop.
    pub pretrain: PretrainConfig,
    /// The kNN monitor: every this many epochs (0: never) ...
    pub knn_every: usize,
    /// ... with this many neighbours ...
    pub knn_k: usize,
    /// ... on at most this many training and test images (0: all).
    pub monitor_limit: usize,
    /// The final linear probe.
    pub probe: ProbeConfig,
    /// Images per batch when embedding for evaluation.
    pub eval_batch: usize,
    /// Also probe raw pixels and the randomly initialised backbone.
    pub baselines: bool,
    /// Settings of `vlgo identity | coefficients | neighbours | paths`.
    #[serde(default)]
    pub diagnostics: DiagnosticsConfig,
    /// Settings of `vlgo semisup`.
    #[serde(default)]
    pub semisup: SemisupConfig,
}

impl ImageRunConfig {
    /// Reads a TOML file.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(CliError::io(path))?;
        toml::from_str(&text).map_err(|e| {
            CliError::invalid(
                "config",
                path.display(),
                format!("expected a valid config: {e}"),
            )
        })
    }

    /// The settings in which `other` differs from `self`, each as `key: <self's> -> <other's>`
    /// with the key dotted as `--set` takes it; `data_dir` is compared only when `other` names
    /// one (a run records the folder it resolved).
    ///
    /// ```
    /// # use vlgo::pretrain::ImageRunConfig;
    /// let text = std::fs::read_to_string("configs/fashion-mnist-simclr-mlp-cpu.toml").unwrap();
    /// let a: ImageRunConfig = toml::from_str(&text).unwrap();
    /// let b = vlgo::settings::set(&a, "pretrain.epochs=4").unwrap();
    /// let changed = a.differences(&b).unwrap();
    /// assert_eq!(changed, [format!("pretrain.epochs: {} -> 4", a.pretrain.epochs)]);
    /// assert!(a.differences(&a).unwrap().is_empty());
    /// ```
    pub fn differences(&self, other: &Self) -> Result<Vec<String>> {
        let mut mine = self.clone();
        if other.data_dir.is_none() {
            mine.data_dir = None;
        }
        let value = |c: &Self| {
            toml::Value::try_from(c)
                .map_err(|e| CliError::invalid("config", e.to_string(), "settings TOML can hold"))
        };
        let mut out = Vec::new();
        differing_keys(&value(&mine)?, &value(other)?, "", &mut out);
        Ok(out)
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        if !DATASETS.contains(&self.dataset.as_str()) {
            return Err(CliError::invalid(
                "dataset",
                format!("{:?}", self.dataset),
                format!("one of {}", DATASETS.join(", ")),
            ));
        }
        self.pretrain.validate()?;
        self.diagnostics.validate()?;
        self.semisup.validate()?;
        for (name, v) in [
            ("image_size", self.image_size),
            ("knn_k", self.knn_k),
            ("eval_batch", self.eval_batch),
            ("probe.epochs", self.probe.epochs),
            ("probe.batch_size", self.probe.batch_size),
        ] {
            if v == 0 {
                return Err(CliError::invalid(name, 0, "must be >= 1"));
            }
        }
        Ok(())
    }
}

/// Appends the dotted keys under `prefix` whose values differ between `a` and `b`.
fn differing_keys(a: &toml::Value, b: &toml::Value, prefix: &str, out: &mut Vec<String>) {
    let key = |k: &str| match prefix {
        "" => k.to_string(),
        p => format!("{p}.{k}"),
    };
    match (a, b) {
        (toml::Value::Table(x), toml::Value::Table(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            let absent = toml::Value::String("(absent)".into());
            for k in keys {
                let (u, v) = (x.get(k).unwrap_or(&absent), y.get(k).unwrap_or(&absent));
                differing_keys(u, v, &key(k), out);
            }
        }
        _ if a != b => out.push(format!("{prefix}: {a} -> {b}")),
        _ => {}
    }
}

/// Settings of the diagnostics (`[diagnostics]` in a run's `config.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiagnosticsConfig {
    /// Seed of the coefficient draws and of the random perturbation.
    pub seed: u64,
    /// `neighbours`: test images shown (the first of each class, class by class).
    pub neighbour_images: usize,
    /// `neighbours`: prior samples per test image.
    pub neighbour_samples: usize,
    /// `paths`: generators drawn (the largest by Frobenius norm).
    pub path_generators: usize,
    /// `paths`: test features moved along each generator.
    pub path_features: usize,
    /// `paths`: t runs over [-t_max, t_max] ...
    pub path_t_max: f64,
    /// ... at this many points.
    pub path_points: usize,
}

impl Default for DiagnosticsConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            neighbour_images: 6,
            neighbour_samples: 6,
            path_generators: 4,
            path_features: 5,
            path_t_max: 1.0,
            path_points: 41,
        }
    }
}

impl DiagnosticsConfig {
    /// Checks every setting.
    pub fn validate(&self) -> Result<()> {
        for (name, v, least) in [
            ("diagnostics.neighbour_images", self.neighbour_images, 1),
            ("diagnostics.neighbour_samples", self.neighbour_samples, 1),
            ("diagnostics.path_generators", self.path_generators, 1),
            ("diagnostics.path_features", self.path_features, 1),
            ("diagnostics.path_points", self.path_points, 2),
        ] {
            if v < least {
                return Err(CliError::invalid(name, v, format!("at least {least}")));
            }
        }
        if !(self.path_t_max > 0.0 && self.path_t_max.is_finite()) {
            return Err(CliError::invalid(
                "diagnostics.path_t_max",
                self.path_t_max,
                "finite and > 0",
            ));
        }
        Ok(())
    }
}
