//! The paper's synthetic experiment (its Figure 2): operators learned on a swiss roll with exact
//! sparse inference (FISTA) against variational inference (VLGO), compared on error, sparsity,
//! operators used and training time. The paper's synthetic experiment gives the setting;
//! `docs/swiss-roll.md` the choices and results.

mod config;
mod grid;
mod progress;
mod report;
mod train;

use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use vlgo_core::{ExpmBackend, LieOperators, OperatorForm};
use vlgo_datasets::NeighbourPairs;

pub use config::{DataScale, LrSchedule, Method, SwissRollConfig};
pub use grid::{Conclusion, PAPER_SAMPLES, Regime, RegimeResults, Study};
pub use report::{MethodSummary, Summary};
pub use train::{AmortisationGap, EpochMetrics, MethodRun, amortisation_gap, train_method};

use crate::error::Result;
use crate::run_folder::RunFolder;
use progress::EpochBar;

/// Runs every configured method, writing `config.toml`, `metrics.jsonl`, `summary.json` and
/// `plots/` into `out` (which must not hold a previous run), and returns the summary.
pub fn run<B>(config: &SwissRollConfig, out: &Path, device: &B::Device) -> Result<Summary>
where
    B: AutodiffBackend + ExpmBackend,
    B::InnerBackend: ExpmBackend,
{
    let methods = config.validate()?;
    let folder = RunFolder::create(out)?;
    folder.write_toml("config.toml", config)?;
    let mut roll = vlgo_datasets::SwissRollConfig {
        points: config.points,
        seed: config.seed,
    }
    .generate()?;
    let scale = config.data_scale.resolve(&roll.points)?;
    scale_points(&mut roll.points, scale);
    let pairs = NeighbourPairs::new(&roll.points, config.k1, config.k2)?;
    let mut metrics = folder.jsonl("metrics.jsonl")?;
    let mut runs = Vec::with_capacity(methods.len());
    let batches = config.points.div_ceil(config.batch_size);
    for method in methods {
        let bar = EpochBar::new(&method.to_string(), config.epochs);
        let run = train_method::<B>(config, method, &roll.points, &pairs, device, |m| {
            bar.update(m);
            metrics.write(&report::metrics_line(method, m, batches))
        })?;
        bar.finish(&run);
        runs.push(run);
    }
    let mut summary = Summary::new(&runs, scale);
    summary.backend = B::name(device);
    summary.device = format!("{device:?}");
    folder.write_json("summary.json", &summary)?;
    report::plot_curves(&folder.plots_dir()?, &runs)?;
    if let Some(run) = path_model(&runs) {
        let operators = host_operators::<B::InnerBackend>(run, config.num_operators, device)?;
        report::plot_paths(
            &folder.plots_dir()?.join("paths.png"),
            run,
            &operators,
            &roll.points,
            config.path_extent,
        )?;
    }
    println!("\n{}", summary.table());
    println!("run folder: {}", folder.path().display());
    Ok(summary)
}

/// Divides every coordinate by `scale`. Neighbours, and so the pairs, do not change.
///
/// ```
/// let mut points = vec![[2.0f32, -4.0, 6.0]];
/// vlgo::swiss_roll::scale_points(&mut points, 2.0);
/// assert_eq!(points, vec![[1.0, -2.0, 3.0]]);
/// ```
pub fn scale_points(points: &mut [[f32; 3]], scale: f64) {
    for p in points {
        for v in p {
            *v = (f64::from(*v) / scale) as f32;
        }
    }
}

/// The model whose extrapolated paths are drawn: the thresholded one with the most samples,
/// else any variational one, else FISTA's.
fn path_model(runs: &[MethodRun]) -> Option<&MethodRun> {
    let samples = |r: &&MethodRun| match r.method {
        Method::Vlgo {
            thresholded,
            samples,
        } => (1 + thresholded as usize, samples),
        Method::Fista => (0, 0),
    };
    runs.iter().max_by_key(samples)
}

fn host_operators<B: Backend>(
    run: &MethodRun,
    m: usize,
    device: &B::Device,
) -> Result<LieOperators<B>> {
    let psi = Tensor::<B, 1>::from_floats(run.psi.as_slice(), device).reshape([m, 1, 3, 3]);
    Ok(LieOperators::from_generators(psi, OperatorForm::Dense, 3)?)
}

/// A run folder under `runs/` that does not exist yet: `runs/swiss-roll[-full]-seed<N>`, with
/// `-2`, `-3`, .. appended when taken.
pub fn default_out_dir(full: bool, seed: u64) -> PathBuf {
    let base = format!(
        "runs/swiss-roll{}-seed{seed}",
        if full { "-full" } else { "" }
    );
    (1..)
        .map(|i| match i {
            1 => PathBuf::from(&base),
            i => PathBuf::from(format!("{base}-{i}")),
        })
        .find(|p| !p.exists())
        .expect("some suffix is free")
}
