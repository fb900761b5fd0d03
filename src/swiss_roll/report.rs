//! What a swiss-roll run reports: `metrics.jsonl` lines, `summary.json`, the results table and
//! the plots.

use std::collections::BTreeMap;
use std::path::Path;

use burn::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use vlgo_core::{ExpmBackend, LieOperators};

use super::config::Method;
use super::train::{AmortisationGap, EpochMetrics, MethodRun};
use crate::error::Result;
use crate::plot::{Series, line_chart, paths_3d};

/// One `metrics.jsonl` object.
pub(super) fn metrics_line(method: Method, m: &EpochMetrics, batches: usize) -> serde_json::Value {
    let mut line = json!({
        "method": method.to_string(),
        "epoch": m.epoch,
        "step": m.epoch * batches,
        "mse": m.mse,
        "l1": m.l1,
        "zero_fraction": m.zero_fraction,
        "train_seconds": m.seconds,
    });
    if let Some(kl) = m.kl {
        line["kl"] = json!(kl);
    }
    if let Some(its) = m.fista_iterations {
        line["fista_iterations"] = json!(its);
    }
    if let Some(scale) = &m.posterior_scale {
        line["posterior_scale"] = json!(scale);
    }
    if let Some(mse) = m.mse_at_location {
        line["mse_at_location"] = json!(mse);
    }
    if let Some(gap) = &m.gap {
        line["gap"] = json!(gap);
    }
    line
}

/// `summary.json` figures of one method (`docs/swiss-roll.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodSummary {
    /// Mean ||x' - T(c) x||^2 over the last epoch.
    pub final_mse: f64,
    /// Mean sum_m |c_m| over the last epoch (coefficients used for transport).
    pub final_l1: f64,
    /// Fraction of exact zeros among those coefficients over the last epoch.
    #[serde(default)]
    pub final_zero_fraction: f64,
    /// Training seconds (data generation, logging and plots excluded).
    pub train_seconds: f64,
    /// Generators with F-norm above 5% of the largest.
    pub nonzero_operators: usize,
    /// FISTA's train_seconds over this method's (when FISTA ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_vs_fista: Option<f64>,
    /// Mean FISTA iterations per batch (FISTA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_fista_iterations: Option<f64>,
    /// Mean ||x' - T(mu) x||^2 at the encoder's location over the last epoch (variational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_mse_at_location: Option<f64>,
    /// The last amortisation gap measured (variational, `gap_every` > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap: Option<AmortisationGap>,
    /// The posterior's mean scale per operator over the last epoch (variational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_posterior_scale: Option<Vec<f64>>,
    /// ||Psi_m||_F of every generator.
    pub operator_norms: Vec<f64>,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The Burn backend the run trained on (`Backend::name`).
    #[serde(default)]
    pub backend: String,
    /// Its device.
    #[serde(default)]
    pub device: String,
    /// What the roll's coordinates were divided by (`data_scale`, resolved).
    pub data_scale: f64,
    /// Per method, by name.
    pub methods: BTreeMap<String, MethodSummary>,
    /// Order the methods ran in.
    #[serde(skip)]
    pub order: Vec<String>,
}

impl Summary {
    /// Summarises trained methods on data divided by `data_scale`.
    pub fn new(runs: &[MethodRun], data_scale: f64) -> Self {
        let fista = runs
            .iter()
            .find(|r| r.method == Method::Fista)
            .map(MethodRun::train_seconds);
        let methods = runs
            .iter()
            .map(|r| {
                let last = r.epochs.last();
                let summary = MethodSummary {
                    final_mse: last.map_or(f64::NAN, |e| e.mse),
                    final_l1: last.map_or(f64::NAN, |e| e.l1),
                    final_zero_fraction: last.map_or(f64::NAN, |e| e.zero_fraction),
                    train_seconds: r.train_seconds(),
                    nonzero_operators: r.nonzero_operators(),
                    speedup_vs_fista: fista.map(|f| f / r.train_seconds()),
                    mean_fista_iterations: r.mean_fista_iterations(),
                    final_mse_at_location: last.and_then(|e| e.mse_at_location),
                    last_gap: r.epochs.iter().rev().find_map(|e| e.gap),
                    final_posterior_scale: last.and_then(|e| e.posterior_scale.clone()),
                    operator_norms: r.operator_norms.clone(),
                };
                (r.method.to_string(), summary)
            })
            .collect();
        Self {
            backend: String::new(),
            device: String::new(),
            data_scale,
            methods,
            order: runs.iter().map(|r| r.method.to_string()).collect(),
        }
    }

    /// The results as a Markdown table, in run order.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| method | final MSE | MSE at location | objective gap | final l1 | non-zero operators | train s | speed-up vs FISTA | FISTA iterations |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for name in &self.order {
            let m = &self.methods[name];
            let opt = |v: Option<f64>, digits: usize| {
                v.map_or("-".to_string(), |v| format!("{v:.digits$}"))
            };
            out += &format!(
                "| {name} | {:.4} | {} | {} | {:.4} | {} | {:.1} | {} | {} |\n",
                m.final_mse,
                opt(m.final_mse_at_location, 4),
                opt(m.last_gap.map(|g| g.objective_gap), 4),
                m.final_l1,
                m.nonzero_operators,
                m.train_seconds,
                opt(m.speedup_vs_fista, 1),
                opt(m.mean_fista_iterations, 1),
            );
        }
        out
    }
}

/// `mse.png`, `runtime.png` and `l1.png`: one line per method against the epoch.
pub(super) fn plot_curves(dir: &Path, runs: &[MethodRun]) -> Result<()> {
    let names: Vec<String> = runs.iter().map(|r| r.method.to_string()).collect();
    let curves = |f: fn(&EpochMetrics) -> f64| -> Vec<Series> {
        runs.iter()
            .zip(&names)
            .map(|(r, name)| Series {
                name,
                points: r.epochs.iter().map(|e| (e.epoch as f64, f(e))).collect(),
            })
            .collect()
    };
    let mse = curves(|e| e.mse);
    line_chart(
        &dir.join("mse.png"),
        "Reconstruction error",
        "epoch",
        "mean ||x' - T(c) x||^2",
        &mse,
        true,
    )?;
    let runtime = curves(|e| e.seconds);
    line_chart(
        &dir.join("runtime.png"),
        "Cumulative training time",
        "epoch",
        "seconds",
        &runtime,
        true,
    )?;
    let l1 = curves(|e| e.l1);
    line_chart(
        &dir.join("l1.png"),
        "Coefficient l1",
        "epoch",
        "mean sum_m |c_m|",
        &l1,
        false,
    )
}

/// Extrapolated paths T(t e_m) x for t on a grid in [-extent, extent], for each non-zero
/// operator m of `run`, from a few points spread over the roll.
pub(super) fn plot_paths<B: ExpmBackend>(
    path: &Path,
    run: &MethodRun,
    operators: &LieOperators<B>,
    roll: &[[f32; 3]],
    extent: f64,
) -> Result<()> {
    const GRID: usize = 41;
    const STARTS: usize = 8;
    let largest = run.operator_norms.iter().cloned().fold(0.0, f64::max);
    let m = run.operator_norms.len();
    let device = operators.psi().device();
    let starts: Vec<[f32; 3]> = (0..STARTS).map(|i| roll[i * roll.len() / STARTS]).collect();
    let grid: Vec<f64> = (0..GRID)
        .map(|g| extent * (2.0 * g as f64 / (GRID - 1) as f64 - 1.0))
        .collect();
    let mut paths = Vec::new();
    for (op, _) in run
        .operator_norms
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0.05 * largest)
    {
        // All (start, grid value) pairs at once: [STARTS * GRID, M] coefficients.
        let mut c = vec![0.0f32; STARTS * GRID * m];
        let mut z = Vec::with_capacity(STARTS * GRID * 3);
        for s in &starts {
            for &t in &grid {
                c[(z.len() / 3) * m + op] = t as f32;
                z.extend_from_slice(s);
            }
        }
        let c = Tensor::<B, 1>::from_floats(c.as_slice(), &device).reshape([STARTS * GRID, m]);
        let z = Tensor::<B, 1>::from_floats(z.as_slice(), &device).reshape([STARTS * GRID, 3]);
        let moved = operators
            .try_transport(c, z)?
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("float tensor converts to f32");
        let lines = moved
            .chunks(GRID * 3)
            .map(|line| line.chunks(3).map(|p| [p[0], p[1], p[2]]).collect())
            .collect();
        paths.push((format!("operator {}", op + 1), lines));
    }
    paths_3d(
        path,
        &format!(
            "{}: paths T(c e_m) x, c in [-{extent}, {extent}]",
            run.method
        ),
        roll,
        &paths,
    )
}
