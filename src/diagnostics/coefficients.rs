//! `vlgo coefficients`: which generators the learned prior uses for which class: the mean |c| of
//! one prior sample per test image, per class and generator, as `coefficients.json` and the
//! heat map `plots/coefficients.png`.

use manifoldclr::TrainBackend;
use serde_json::{Value, json};

use super::{ManifoldRun, PriorKind, host};
use crate::error::{CliError, Result};
use crate::plot::heat_map;

/// Noise stream of the draws.
const STREAM: u64 = 3;

/// Coefficient figures per class (rows) and generator (columns).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassMeans {
    /// Mean |c|.
    pub mean_abs: Vec<Vec<f64>>,
    /// Share of non-zero entries.
    pub nonzero_share: Vec<Vec<f64>>,
    /// Rows per class (a class without rows has means of 0).
    pub counts: Vec<usize>,
}

/// The [`ClassMeans`] of `c` ([N, M] row-major, `labels` one per row).
pub fn class_means(c: &[f32], m: usize, labels: &[u16], classes: usize) -> Result<ClassMeans> {
    if m == 0 || c.len() != m * labels.len() {
        return Err(CliError::invalid(
            "coefficients",
            format!("{} values for {} labels", c.len(), labels.len()),
            format!("{m} (>= 1) per label"),
        ));
    }
    if let Some(l) = labels.iter().find(|&&l| usize::from(l) >= classes) {
        return Err(CliError::invalid(
            "coefficient labels",
            l,
            format!("labels below {classes}"),
        ));
    }
    let mut sum = vec![vec![0.0; m]; classes];
    let mut nonzero = vec![vec![0.0; m]; classes];
    let mut count = vec![0usize; classes];
    for (row, &label) in c.chunks_exact(m).zip(labels) {
        let k = usize::from(label);
        count[k] += 1;
        for (j, &v) in row.iter().enumerate() {
            sum[k][j] += f64::from(v.abs());
            nonzero[k][j] += f64::from(u8::from(v != 0.0));
        }
    }
    for (k, &n) in count.iter().enumerate() {
        let n = n.max(1) as f64;
        sum[k].iter_mut().for_each(|v| *v /= n);
        nonzero[k].iter_mut().for_each(|v| *v /= n);
    }
    Ok(ClassMeans {
        mean_abs: sum,
        nonzero_share: nonzero,
        counts: count,
    })
}

/// Writes `coefficients.json` and `plots/coefficients.png`; returns the JSON.
pub fn coefficients<B: TrainBackend>(run: &ManifoldRun<B>) -> Result<Value> {
    let test = &run.data.test;
    eprintln!("coefficients: embedding {} images", test.len());
    let features = run.embed(test)?;
    let m = run.vlgo().operators.num_operators();
    let mut c = Vec::with_capacity(features.len() * m);
    for start in (0..features.len()).step_by(run.config.eval_batch) {
        let end = (start + run.config.eval_batch).min(features.len());
        let z = run.rows(&features, start..end);
        c.extend(host(run.prior_sample(
            z,
            PriorKind::Learned,
            start as u64,
            STREAM,
        )?)?);
    }
    let classes = &test.classes;
    let means = class_means(&c, m, &features.labels, classes.len())?;
    let plot = run.folder.plots_dir()?.join("coefficients.png");
    heat_map(
        &plot,
        "mean |c| of learned-prior samples, per test class",
        "generator",
        classes,
        &means.mean_abs,
    )?;
    let result = json!({
        "classes": classes,
        "images_per_class": means.counts,
        "generators": m,
        "mean_abs": means.mean_abs,
        "nonzero_share": means.nonzero_share,
        "plot": "plots/coefficients.png",
    });
    run.folder.write_json("coefficients.json", &result)?;
    Ok(result)
}
