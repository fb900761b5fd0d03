//! Settings of the swiss-roll experiment and the names of its methods.

use std::fmt;

use serde::{Deserialize, Serialize};
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
    /// Threshold zeta of the thresholded methods (`noise` variant).
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
        }
    }

    /// The paper's size: 1000 epochs.
    pub fn full() -> Self {
        Self {
            epochs: 1000,
            ..Self::reduced()
        }
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
        Threshold::new(self.zeta, ThresholdVariant::Noise)?;
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
