//! Settings of the swiss-roll experiment and the names of its methods.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use vlgo_core::{FixedPrior, Threshold, ThresholdVariant};

use crate::error::{CliError, Result};

/// One training method of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Exact sparse inference per batch (FISTA), then an operator step.
    Fista,
    /// Variational inference with plain (`thresholded = false`) or thresholded Laplace samples,
    /// best of `samples`.
    Vlgo {
        /// Thresholded (`noise` variant) samples.
        thresholded: bool,
        /// J.
        samples: usize,
    },
}

impl Method {
    /// Parses `fista`, `laplace_j<J>` or `thresholded_j<J>` (J >= 1).
    ///
    /// ```
    /// use vlgo::swiss_roll::Method;
    /// assert_eq!(Method::parse("laplace_j5").unwrap(), Method::Vlgo { thresholded: false, samples: 5 });
    /// assert!(Method::parse("laplace_j0").is_err());
    /// assert!(Method::parse("sgd").is_err());
    /// ```
    pub fn parse(name: &str) -> Result<Self> {
        let unknown = || {
            CliError::invalid(
                "swiss-roll method",
                name,
                "expected fista, laplace_j<J> or thresholded_j<J> with J >= 1",
            )
        };
        if name == "fista" {
            return Ok(Self::Fista);
        }
        let (thresholded, j) = if let Some(j) = name.strip_prefix("laplace_j") {
            (false, j)
        } else if let Some(j) = name.strip_prefix("thresholded_j") {
            (true, j)
        } else {
            return Err(unknown());
        };
        match j.parse::<usize>() {
            Ok(samples) if samples >= 1 && j == samples.to_string() => Ok(Self::Vlgo {
                thresholded,
                samples,
            }),
            _ => Err(unknown()),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fista => write!(f, "fista"),
            Self::Vlgo {
                thresholded: false,
                samples,
            } => write!(f, "laplace_j{samples}"),
            Self::Vlgo {
                thresholded: true,
                samples,
            } => write!(f, "thresholded_j{samples}"),
        }
    }
}

/// What the roll's coordinates are divided by before training: a factor s (1 keeps the raw
/// roll, whose coordinates reach about 14), or `"unit"`, the pooled standard deviation of the
/// three coordinates, so that the set has unit variance. For the objective, dividing the data by
/// s is the same as multiplying the l1, Frobenius and KL weights by s^2 (Adam's steps do not
/// depend on the loss's overall scale); the encoder, though, reads the divided coordinates.
///
/// In `config.toml` and `--set`: a number or `"unit"`.
///
/// ```
/// use vlgo::swiss_roll::DataScale;
/// let points = [[1.0f32, 0.0, 3.0], [3.0, 0.0, 5.0]];
/// assert_eq!(DataScale::Factor(2.0).resolve(&points).unwrap(), 2.0);
/// // Variances 1, 0 and 1: pooled 2/3.
/// let s = DataScale::UnitVariance.resolve(&points).unwrap();
/// assert!((s - (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
/// assert!(DataScale::Factor(0.0).resolve(&points).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DataScale {
    /// Divide by this factor (> 0).
    Factor(f64),
    /// Divide by the pooled standard deviation.
    UnitVariance,
}

impl Default for DataScale {
    fn default() -> Self {
        Self::Factor(1.0)
    }
}

impl DataScale {
    /// The divisor for `points`.
    pub fn resolve(&self, points: &[[f32; 3]]) -> Result<f64> {
        let s = match *self {
            Self::Factor(s) => s,
            Self::UnitVariance => {
                let n = points.len() as f64;
                let mut variance = 0.0;
                for k in 0..3 {
                    let mean = points.iter().map(|p| f64::from(p[k])).sum::<f64>() / n;
                    variance += points
                        .iter()
                        .map(|p| (f64::from(p[k]) - mean).powi(2))
                        .sum::<f64>()
                        / n;
                }
                (variance / 3.0).sqrt()
            }
        };
        match s > 0.0 && s.is_finite() {
            true => Ok(s),
            false => Err(CliError::invalid(
                "data_scale",
                s,
                "a finite factor > 0 (\"unit\" needs points that are not all equal)",
            )),
        }
    }
}

impl fmt::Display for DataScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Factor(s) => write!(f, "{s}"),
            Self::UnitVariance => write!(f, "unit"),
        }
    }
}

impl Serialize for DataScale {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Factor(s) => serializer.serialize_f64(*s),
            Self::UnitVariance => serializer.serialize_str("unit"),
        }
    }
}

impl<'de> Deserialize<'de> for DataScale {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DataScale;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a number > 0 or \"unit\"")
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<DataScale, E> {
                Ok(DataScale::Factor(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<DataScale, E> {
                Ok(DataScale::Factor(v as f64))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<DataScale, E> {
                Ok(DataScale::Factor(v as f64))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<DataScale, E> {
                match v {
                    "unit" => Ok(DataScale::UnitVariance),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// How the learning rates of operators and encoder move over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LrSchedule {
    /// The configured rates throughout (the paper's).
    #[default]
    Constant,
    /// Cosine decay from the configured rates toward 0 (reached just after the last step).
    Cosine,
}

impl LrSchedule {
    /// The factor on the configured rates at `step` of `total`.
    ///
    /// ```
    /// use vlgo::swiss_roll::LrSchedule;
    /// assert_eq!(LrSchedule::Constant.factor(7, 10), 1.0);
    /// assert_eq!(LrSchedule::Cosine.factor(0, 10), 1.0);
    /// assert!((LrSchedule::Cosine.factor(5, 10) - 0.5).abs() < 1e-12);
    /// ```
    pub fn factor(&self, step: u64, total: u64) -> f64 {
        match self {
            Self::Constant => 1.0,
            Self::Cosine => {
                let t = step as f64 / total.max(1) as f64;
                0.5 * (1.0 + (std::f64::consts::PI * t.min(1.0)).cos())
            }
        }
    }
}

fn default_gap_every() -> usize {
    10
}

/// Every setting of a swiss-roll run; written resolved to the run folder's `config.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwissRollConfig {
    /// Seed of the data, the initialisations and every noise draw.
    pub seed: u64,
    /// Points on the roll.
    pub points: usize,
    /// Partners are drawn from the k1-th..k2-th nearest neighbours.
    pub k1: usize,
    /// See `k1`.
    pub k2: usize,
    /// Epochs (one pass over the points each).
    pub epochs: usize,
    /// Points per iteration.
    pub batch_size: usize,
    /// Methods to train, by name (`fista`, `laplace_j<J>`, `thresholded_j<J>`).
    pub methods: Vec<String>,
    /// Number of operators M (each 3 x 3).
    pub num_operators: usize,
    /// Standard deviation of the operators' normal initialisation.
    pub init_std: f64,
    /// Weight of sum_m |c_m| in the exact-inference objective.
    pub l1_weight: f64,
    /// Weight of the explicit penalty sum_m ||Psi_m||_F^2.
    pub frobenius_weight: f64,
    /// Adam learning rate of the operators (every method).
    pub operator_lr: f64,
    /// Adam learning rate of the encoder (variational methods).
    pub encoder_lr: f64,
    /// Encoder width F: MLP 6 -> 4F -> 4F -> F, heads F -> M.
    pub encoder_width: usize,
    /// KL weight beta.
    pub beta: f64,
    /// Fixed Laplace prior of the variational methods.
    pub prior: FixedPrior,
    /// Threshold zeta of the thresholded methods (variant: `threshold_variant`).
    pub zeta: f64,
    /// FISTA tolerance on the relative change of the batch's coefficients.
    pub fista_tolerance: f64,
    /// FISTA iterations per batch at most.
    pub fista_max_iterations: usize,
    /// Threads FISTA splits each batch over (0: one per available core). Every count gives the
    /// same coefficients; see `vlgo_core::FistaConfig::threads`.
    pub fista_threads: usize,
    /// Extrapolated paths use c on a grid in [-N_c, N_c].
    pub path_extent: f64,
    /// What the coordinates are divided by before training (a number, or `"unit"`).
    #[serde(default)]
    pub data_scale: DataScale,
    /// How the thresholded methods threshold: `noise` (the public code's, the default) or
    /// `sample` (the paper's Algorithm 1: the whole sample, so unused operators get exact zeros).
    #[serde(default)]
    pub threshold_variant: ThresholdVariant,
    /// Whether the encoder reads its inputs standardised per coordinate (the transport keeps the
    /// raw coordinates).
    #[serde(default)]
    pub standardise_encoder_input: bool,
    /// Learning-rate schedule of operators and encoder (`constant` or `cosine`).
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Every this many epochs, each variational method's amortisation gap: FISTA with the
    /// method's current operators on the epoch's last batch (0: never).
    #[serde(default = "default_gap_every")]
    pub gap_every: usize,
}

impl SwissRollConfig {
    /// The reduced default run: 200 epochs.
    pub fn reduced() -> Self {
        Self {
            seed: 0,
            points: 5000,
            k1: 20,
            k2: 60,
            epochs: 200,
            batch_size: 500,
            methods: [
                "fista",
                "laplace_j1",
                "laplace_j5",
                "laplace_j20",
                "thresholded_j1",
                "thresholded_j5",
                "thresholded_j20",
            ]
            .map(String::from)
            .to_vec(),
            num_operators: 6,
            init_std: 0.1,
            l1_weight: 0.6,
            frobenius_weight: 1e-3,
            operator_lr: 1e-2,
            encoder_lr: 3e-3,
            encoder_width: 16,
            beta: 5e-3,
            prior: FixedPrior {
                shift: 0.0,
                scale: 0.01,
            },
            zeta: 0.002,
            fista_tolerance: 1e-4,
            fista_max_iterations: 300,
            fista_threads: 0,
            path_extent: 1.0,
            data_scale: DataScale::default(),
            threshold_variant: ThresholdVariant::Noise,
            standardise_encoder_input: false,
            lr_schedule: LrSchedule::Constant,
            gap_every: default_gap_every(),
        }
    }

    /// The paper's size: 1000 epochs.
    pub fn full() -> Self {
        Self {
            epochs: 1000,
            ..Self::reduced()
        }
    }

    /// These settings with `methods` set to `method` alone and every setting that cannot change
    /// how `method` trains put back to the default: FISTA ignores the encoder, the KL, the prior,
    /// the threshold and the gap diagnostic; plain Laplace ignores the threshold; the paths'
    /// extent is for plots only. Two configs train `method` identically when these agree (the
    /// runs are deterministic), so a grid trains it once (see [`super::Study`]).
    ///
    /// ```
    /// use vlgo::swiss_roll::{Method, SwissRollConfig};
    /// let mut low_beta = SwissRollConfig::reduced();
    /// low_beta.beta = 5e-4;
    /// let base = SwissRollConfig::reduced();
    /// assert_eq!(low_beta.for_method(Method::Fista), base.for_method(Method::Fista));
    /// let j5 = Method::parse("laplace_j5").unwrap();
    /// assert_ne!(low_beta.for_method(j5), base.for_method(j5));
    /// ```
    pub fn for_method(&self, method: Method) -> Self {
        let d = Self::reduced();
        let mut c = self.clone();
        c.methods = vec![method.to_string()];
        c.path_extent = d.path_extent;
        if let Method::Fista
        | Method::Vlgo {
            thresholded: false, ..
        } = method
        {
            c.zeta = d.zeta;
            c.threshold_variant = d.threshold_variant;
        }
        if method == Method::Fista {
            c.encoder_lr = d.encoder_lr;
            c.encoder_width = d.encoder_width;
            c.beta = d.beta;
            c.prior = d.prior;
            c.standardise_encoder_input = d.standardise_encoder_input;
            c.gap_every = d.gap_every;
        }
        c
    }

    /// The parsed methods, after every setting is checked.
    pub fn validate(&self) -> Result<Vec<Method>> {
        let positive = [
            ("points", self.points),
            ("epochs", self.epochs),
            ("batch_size", self.batch_size),
            ("num_operators", self.num_operators),
            ("encoder_width", self.encoder_width),
            ("fista_max_iterations", self.fista_max_iterations),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(CliError::invalid(name, 0, "must be >= 1"));
        }
        let nonnegative = [
            ("init_std", self.init_std),
            ("l1_weight", self.l1_weight),
            ("frobenius_weight", self.frobenius_weight),
            ("beta", self.beta),
            ("zeta", self.zeta),
            ("fista_tolerance", self.fista_tolerance),
        ];
        if let Some((name, v)) = nonnegative
            .iter()
            .find(|(_, v)| !(*v >= 0.0 && v.is_finite()))
        {
            return Err(CliError::invalid(name, v, "must be finite and >= 0"));
        }
        let positive_f = [
            ("operator_lr", self.operator_lr),
            ("encoder_lr", self.encoder_lr),
            ("path_extent", self.path_extent),
            ("init_std", self.init_std),
        ];
        if let Some((name, v)) = positive_f
            .iter()
            .find(|(_, v)| !(*v > 0.0 && v.is_finite()))
        {
            return Err(CliError::invalid(name, v, "must be finite and > 0"));
        }
        self.prior.validate()?;
        Threshold::new(self.zeta, self.threshold_variant)?;
        if let DataScale::Factor(s) = self.data_scale {
            DataScale::Factor(s).resolve(&[])?;
        }
        if self.k1 == 0 || self.k1 > self.k2 {
            return Err(CliError::invalid(
                "neighbour ranks k1..k2",
                format!("{}..{}", self.k1, self.k2),
                "need 1 <= k1 <= k2",
            ));
        }
        if self.points <= self.k2 {
            return Err(CliError::invalid(
                "points",
                self.points,
                format!("need more points than k2 = {} neighbours", self.k2),
            ));
        }
        if self.methods.is_empty() {
            return Err(CliError::invalid(
                "methods",
                "[]",
                "name at least one method",
            ));
        }
        let methods = self
            .methods
            .iter()
            .map(|name| Method::parse(name))
            .collect::<Result<Vec<_>>>()?;
        for (i, m) in methods.iter().enumerate() {
            if methods[..i].contains(m) {
                return Err(CliError::invalid("methods", m, "each method once"));
            }
        }
        Ok(methods)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_scale_gives_the_roll_unit_variance() {
        let mut roll = vlgo_datasets::SwissRollConfig {
            points: 2000,
            seed: 3,
        }
        .generate()
        .unwrap();
        let s = DataScale::UnitVariance.resolve(&roll.points).unwrap();
        assert!(s > 3.0, "the raw roll spreads over several units: {s}");
        crate::swiss_roll::scale_points(&mut roll.points, s);
        assert!((DataScale::UnitVariance.resolve(&roll.points).unwrap() - 1.0).abs() < 1e-5);
    }

    #[test]
    fn data_scale_reads_numbers_and_unit_and_names_anything_else() {
        #[derive(Deserialize, Serialize)]
        struct T {
            s: DataScale,
        }
        let read = |text: &str| toml::from_str::<T>(text).map(|t| t.s);
        assert_eq!(read("s = 2.5").unwrap(), DataScale::Factor(2.5));
        assert_eq!(read("s = 3").unwrap(), DataScale::Factor(3.0));
        assert_eq!(read("s = \"unit\"").unwrap(), DataScale::UnitVariance);
        let err = read("s = \"wide\"").err().unwrap().to_string();
        assert!(err.contains("wide"), "{err}");
        let written = toml::to_string(&T {
            s: DataScale::UnitVariance,
        })
        .unwrap();
        assert_eq!(written.trim(), "s = \"unit\"");
        let mut config = SwissRollConfig::reduced();
        config.data_scale = DataScale::Factor(-1.0);
        assert!(config.validate().is_err());
    }
}
