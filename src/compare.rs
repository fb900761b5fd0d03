//! `vlgo compare --runs DIR...`: one markdown table of finished image runs, grouped by method:
//! seeds, pre-training time, linear-probe and kNN top-1 as mean and sample standard deviation,
//! effective rank, and from `metrics.jsonl` the training-time figures of the ManifoldCLR
//! acceptance (distance improvement, per-step effective rank).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{CliError, Result};
use crate::run_folder::RunFolder;
pub use crate::stats::mean_std;
use crate::stats::welch;

/// What one run contributes to the table.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFigures {
    /// The method's name.
    pub method: String,
    /// Pre-training seconds.
    pub train_seconds: f64,
    /// Linear-probe top-1.
    pub probe: f64,
    /// kNN top-1.
    pub knn: f64,
    /// Effective rank of the test features.
    pub effective_rank: f64,
    /// Per-step effective rank of the batch features: the smallest over the second half of
    /// training (None when the run logged none).
    pub min_step_rank: Option<f64>,
    /// The largest distance improvement over the second half of training (methods with
    /// operators).
    pub max_late_di: Option<f64>,
    /// The first step from which the distance improvement stays below 1 (None: it ends at 1 or
    /// above, or was not logged).
    pub di_below_one_from: Option<u64>,
}

fn number(v: &Value, pointer: &str, run: &Path) -> Result<f64> {
    v.pointer(pointer).and_then(Value::as_f64).ok_or_else(|| {
        CliError::invalid(
            "summary.json",
            run.display(),
            format!("a finished, evaluated run (no {pointer})"),
        )
    })
}

/// Reads a run folder's summary and metrics.
pub fn figures(run: &Path) -> Result<RunFigures> {
    let summary = RunFolder::existing(run)?.summary()?;
    let path = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).map_err(CliError::io(&path))?;
    let steps: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("loss_nce").is_some())
        .collect();
    let late = &steps[steps.len() / 2..];
    let series = |key: &str| -> Vec<f64> { late.iter().filter_map(|s| s[key].as_f64()).collect() };
    let (ranks, di) = (series("effective_rank"), series("distance_improvement"));
    let di_all: Vec<(u64, f64)> = steps
        .iter()
        .filter_map(|s| Some((s["step"].as_u64()?, s["distance_improvement"].as_f64()?)))
        .collect();
    let di_below_one_from = match di_all.iter().rposition(|(_, d)| *d >= 1.0) {
        Some(i) => di_all.get(i + 1).map(|(s, _)| *s),
        None => di_all.first().map(|(s, _)| *s),
    };
    Ok(RunFigures {
        method: summary["method"]
            .as_str()
            .ok_or_else(|| {
                CliError::invalid("summary.json", run.display(), "a run's summary (no method)")
            })?
            .to_string(),
        train_seconds: number(&summary, "/train_seconds", run)?,
        probe: number(&summary, "/linear_probe/top1", run)?,
        knn: number(&summary, "/knn/top1", run)?,
        effective_rank: number(&summary, "/effective_rank", run)?,
        min_step_rank: ranks.iter().copied().reduce(f64::min),
        max_late_di: di.iter().copied().reduce(f64::max),
        di_below_one_from,
    })
}

/// The markdown table of `runs`, one row per method in order of first appearance.
pub fn table(runs: &[RunFigures]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&RunFigures>> = BTreeMap::new();
    for r in runs {
        if !order.contains(&r.method.as_str()) {
            order.push(&r.method);
        }
        groups.entry(&r.method).or_default().push(r);
    }
    let mut out = String::from(
        "| method | seeds | pre-training s (slowest) | probe top-1 | kNN top-1 | effective rank | \
         min step rank (2nd half) | max DI (2nd half) | DI < 1 from step |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for method in order {
        let g = &groups[method];
        let of = |f: fn(&RunFigures) -> f64| mean_std(&g.iter().map(|r| f(r)).collect::<Vec<_>>());
        // The budget is per run: the slowest seed's pre-training.
        let secs = g.iter().map(|r| r.train_seconds).fold(0.0, f64::max);
        let (p, ps) = of(|r| r.probe);
        let (k, ks) = of(|r| r.knn);
        let (e, _) = of(|r| r.effective_rank);
        let min_rank = g.iter().filter_map(|r| r.min_step_rank).reduce(f64::min);
        let max_di = g.iter().filter_map(|r| r.max_late_di).reduce(f64::max);
        // The latest seed's step, and only when every seed got there.
        let from: Option<Vec<u64>> = g.iter().map(|r| r.di_below_one_from).collect();
        let from = match from {
            Some(steps) => steps
                .into_iter()
                .max()
                .map_or("-".to_string(), |s| s.to_string()),
            None if max_di.is_some() => format!(
                "not for {} of {} seeds",
                g.iter().filter(|r| r.di_below_one_from.is_none()).count(),
                g.len()
            ),
            None => "-".to_string(),
        };
        out += &format!(
            "| `{method}` | {} | {secs:.0} | {p:.2} ± {ps:.2} | {k:.2} ± {ks:.2} | {e:.1} | {} | {} | {} |\n",
            g.len(),
            opt(min_rank, 1),
            opt(max_di, 3),
            from,
        );
    }
    out
}

/// Welch's t-test of each method's probe top-1 against the first method's (the first to
/// appear), one line each, where both have at least two seeds and some spread (the test is
/// undefined otherwise, and the line is left out).
pub fn welch_lines(runs: &[RunFigures]) -> String {
    let mut order: Vec<&str> = Vec::new();
    for r in runs {
        if !order.contains(&r.method.as_str()) {
            order.push(&r.method);
        }
    }
    let probes = |m: &str| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.method == m)
            .map(|r| r.probe)
            .collect()
    };
    let Some((first, rest)) = order.split_first() else {
        return String::new();
    };
    let base = probes(first);
    let mut out = String::new();
    for m in rest {
        let other = probes(m);
        if let Some(w) = welch(&other, &base) {
            let (a, b) = (mean_std(&other).0, mean_std(&base).0);
            out += &format!(
                "- probe top-1, `{m}` - `{first}`: {:+.2} points, Welch's t = {:.2} \
                 (df {:.1}), two-sided p = {:.3}\n",
                a - b,
                w.t,
                w.df,
                w.p_two_sided
            );
        }
    }
    out
}

/// `vlgo compare`: the table of the run folders `runs`, and Welch's t-tests of the probe
/// against the first method.
pub fn compare(runs: &[PathBuf]) -> Result<String> {
    let figures = runs
        .iter()
        .map(|r| figures(r))
        .collect::<Result<Vec<_>>>()?;
    let tests = welch_lines(&figures);
    Ok(match tests.is_empty() {
        true => table(&figures),
        false => format!("{}\n{tests}", table(&figures)),
    })
}
