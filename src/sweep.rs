//! `vlgo sweep`: one pre-training run per point of a grid of settings and seed, one after
//! another, then a table (`sweep.md`) and the paper's Figure 7 form of plots (a figure against
//! the swept value, mean and spread over seeds).
//!
//! The sweep's folder holds one run folder per point, named by its values and seed
//! (`lambda=10-seed0`). Run again, a sweep skips the runs that finished (their `summary.json`
//! has a probe), resumes those that stopped after a checkpoint, and restarts those that
//! stopped before their first one; so an interrupted sweep continues where it stopped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use manifoldclr::TrainBackend;

use crate::compare::{RunFigures, figures};
use crate::error::{CliError, Result};
use crate::plot::{Band, band_chart};
use crate::pretrain::{ImageRunConfig, data::has_checkpoint, pretrain};
use crate::settings::set;
use crate::stats::mean_std;

/// One swept setting, or several linked ones that move together: its dotted key (linked keys
/// joined by `:`) and the values it takes, as written on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The dotted key, e.g. `pretrain.model.manifold.lambda`, or linked keys such as
    /// `beta:prior.scale`.
    pub key: String,
    /// Its values, in the given order (for linked keys, one part per key joined by `:`).
    pub values: Vec<String>,
}

impl Axis {
    /// Parses `KEY=V1,V2,...`, or `KEY1:KEY2=V1:W1,V2:W2,...` for settings that move together.
    ///
    /// ```
    /// let a = vlgo::sweep::Axis::parse("pretrain.model.manifold.lambda=1,10").unwrap();
    /// assert_eq!((a.name(), a.values.len()), ("lambda".to_string(), 2));
    /// let b = vlgo::sweep::Axis::parse("beta:prior.scale=5e-3:0.01,0:0.01").unwrap();
    /// assert_eq!(b.name(), "beta:scale");
    /// assert_eq!(b.settings("0:0.01"), ["beta=0", "prior.scale=0.01"]);
    /// assert!(vlgo::sweep::Axis::parse("beta:prior.scale=5e-3").is_err());
    /// let path = vlgo::sweep::Axis::parse("data_dir=C:/data,/srv/data").unwrap();
    /// assert_eq!(path.settings("C:/data"), ["data_dir=C:/data"]);
    /// ```
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |why: &str| CliError::invalid("--grid", format!("{text:?}"), why);
        let (key, values) = text
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=V1,V2,..."))?;
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        let keys: Vec<&str> = key.split(':').map(str::trim).collect();
        if keys.iter().any(|k| k.is_empty()) || values.iter().any(String::is_empty) {
            return Err(bad("expected KEY=V1,V2,... with a key and no empty value"));
        }
        // One key takes its values whole (a path may hold ':'); linked keys split them.
        if keys.len() > 1 && values.iter().any(|v| v.split(':').count() != keys.len()) {
            return Err(bad(&format!(
                "one part per linked key in every value ({} keys, parts joined by ':')",
                keys.len()
            )));
        }
        let mut seen = values.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != values.len() {
            return Err(bad("expected distinct values"));
        }
        Ok(Self {
            key: keys.join(":"),
            values,
        })
    }

    /// The keys (one, or the linked ones).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.key.split(':')
    }

    /// The last part of each key, joined by `:`: names folders, columns and plots.
    pub fn name(&self) -> String {
        let last = |k: &str| k.rsplit('.').next().unwrap_or(k).to_string();
        self.keys().map(last).collect::<Vec<_>>().join(":")
    }

    /// The `KEY=VALUE` assignments of one of its values.
    pub fn settings(&self, value: &str) -> Vec<String> {
        if !self.key.contains(':') {
            return vec![format!("{}={value}", self.key)];
        }
        self.keys()
            .zip(value.split(':'))
            .map(|(k, v)| format!("{k}={v}"))
            .collect()
    }

    /// `name=value` of each axis, joined by `,`: names a run's folder (`/` written `_`).
    ///
    /// ```
    /// use vlgo::sweep::Axis;
    /// let axes = [Axis::parse("a.lambda=1,10").unwrap(), Axis::parse("dir=x/y").unwrap()];
    /// assert_eq!(Axis::label(&axes, &["10".into(), "x/y".into()]), "lambda=10,dir=x_y");
    /// ```
    pub fn label(axes: &[Axis], values: &[String]) -> String {
        let parts: Vec<String> = axes
            .iter()
            .zip(values)
            .map(|(a, v)| format!("{}={v}", a.name()))
            .collect();
        parts.join(",").replace('/', "_")
    }

    /// Every combination of the axes' values, the last axis varying fastest.
    pub fn grid(axes: &[Axis]) -> Vec<Vec<String>> {
        let mut combos: Vec<Vec<String>> = vec![Vec::new()];
        for axis in axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    axis.values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push(v.clone());
                        c
                    })
                })
                .collect();
        }
        combos
    }

    /// Whether two axes share a name (each names folders and columns) or a key.
    pub fn clash(axes: &[Axis]) -> Option<String> {
        let mut names = HashSet::new();
        let mut keys = HashSet::new();
        for a in axes {
            if !names.insert(a.name()) || a.keys().any(|k| !keys.insert(k.to_string())) {
                let all: Vec<&str> = axes.iter().map(|a| a.key.as_str()).collect();
                return Some(all.join(", "));
            }
        }
        None
    }
}

/// A sweep: the base config (with `--set` applied), its axes and seeds, and its folder.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The settings every run starts from.
    pub base: ImageRunConfig,
    /// The swept settings.
    pub axes: Vec<Axis>,
    /// The seeds of each point (`pretrain.seed`).
    pub seeds: Vec<u64>,
    /// The sweep's folder.
    pub out: PathBuf,
}

/// One run of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The value of each axis, in the axes' order.
    pub values: Vec<String>,
    /// The seed.
    pub seed: u64,
    /// Its settings, validated.
    pub config: ImageRunConfig,
    /// Its run folder.
    pub dir: PathBuf,
}

impl Sweep {
    /// The default folder: `runs/<config name>-sweep-<axis names joined by '-'>`.
    pub fn default_out(config_path: &Path, axes: &[Axis]) -> PathBuf {
        let stem = config_path
            .file_stem()
            .map_or("run".into(), |s| s.to_string_lossy());
        let names: Vec<String> = axes.iter().map(Axis::name).collect();
        PathBuf::from("runs").join(format!("{stem}-sweep-{}", names.join("-")))
    }

    /// Every run of the grid (the last axis varying fastest, seeds innermost), each config
    /// built and validated: a bad key or value is an error before any run starts.
    pub fn points(&self) -> Result<Vec<Point>> {
        if self.axes.is_empty() {
            return Err(CliError::invalid(
                "sweep",
                "no --grid",
                "at least one --grid KEY=V1,V2,...",
            ));
        }
        if self.seeds.is_empty() {
            return Err(CliError::invalid("--seeds", "none", "at least one seed"));
        }
        let distinct = |xs: Vec<String>| xs.len() == xs.iter().collect::<HashSet<_>>().len();
        if !distinct(self.seeds.iter().map(u64::to_string).collect()) {
            return Err(CliError::invalid(
                "--seeds",
                format!("{:?}", self.seeds),
                "distinct seeds",
            ));
        }
        // Names label folders, columns and plots: two axes may not share one.
        if let Some(keys) = Axis::clash(&self.axes) {
            return Err(CliError::invalid(
                "--grid",
                keys,
                "settings whose last names differ (each names its folders, columns and plots)",
            ));
        }
        if let Some(a) = self
            .axes
            .iter()
            .find(|a| a.keys().any(|k| k == "pretrain.seed"))
        {
            return Err(CliError::invalid(
                "--grid",
                &a.key,
                "another setting (seeds are swept with --seeds)",
            ));
        }
        let combos = Axis::grid(&self.axes);
        let mut points = Vec::new();
        for values in combos {
            for &seed in &self.seeds {
                let mut config = self.base.clone();
                for (axis, v) in self.axes.iter().zip(&values) {
                    for assignment in axis.settings(v) {
                        config = set(&config, &assignment)?;
                    }
                }
                config = set(&config, &format!("pretrain.seed={seed}"))?;
                config.validate()?;
                let dir = self
                    .out
                    .join(format!("{}-seed{seed}", Axis::label(&self.axes, &values)));
                points.push(Point {
                    values: values.clone(),
                    seed,
                    config,
                    dir,
                });
            }
        }
        let mut dirs = HashSet::new();
        if let Some(p) = points.iter().find(|p| !dirs.insert(p.dir.clone())) {
            return Err(CliError::invalid(
                "--grid",
                p.dir.display(),
                "values that name distinct run folders ('/' is written '_')",
            ));
        }
        Ok(points)
    }

    /// Runs what is not finished, then writes `sweep.md` and the plots; returns the table.
    pub fn run<B: TrainBackend>(&self, device: &B::Device) -> Result<String> {
        let points = self.points()?;
        // A folder left by a sweep with other settings would be skipped or resumed as if it
        // were this one's: refuse before any run starts.
        for p in &points {
            let changed = changed_settings(&p.dir, &p.config)?;
            if !changed.is_empty() {
                return Err(CliError::invalid(
                    "sweep folder",
                    p.dir.display(),
                    format!(
                        "a run of this sweep's settings (it holds a run with other settings: \
                         {}; choose another --out)",
                        changed.join(", ")
                    ),
                ));
            }
        }
        std::fs::create_dir_all(&self.out).map_err(CliError::io(&self.out))?;
        for (i, p) in points.iter().enumerate() {
            let tag = format!("[{}/{}] {}", i + 1, points.len(), p.dir.display());
            match finished(&p.dir) {
                true => eprintln!("{tag}: finished, skipped"),
                false => {
                    let resume = has_checkpoint(&p.dir.join("checkpoints"));
                    if !resume && p.dir.exists() {
                        // Stopped before its first checkpoint: nothing to continue from.
                        std::fs::remove_dir_all(&p.dir).map_err(CliError::io(&p.dir))?;
                    }
                    eprintln!("{tag}: {}", if resume { "resuming" } else { "starting" });
                    pretrain::<B>(&p.config, &p.dir, resume, device)?;
                }
            }
        }
        let rows = points
            .iter()
            .map(|p| Ok((p.values.clone(), figures(&p.dir)?)))
            .collect::<Result<Vec<_>>>()?;
        let text = self.table(&rows);
        let path = self.out.join("sweep.md");
        std::fs::write(&path, &text).map_err(CliError::io(&path))?;
        self.plots(&rows)?;
        Ok(text)
    }

    /// The markdown table: one row per grid point, mean ± sample standard deviation over its
    /// seeds.
    pub fn table(&self, rows: &[(Vec<String>, RunFigures)]) -> String {
        let names: Vec<String> = self.axes.iter().map(Axis::name).collect();
        let mut out = format!(
            "| {} | method | seeds | pre-training s (slowest) | probe top-1 | kNN top-1 | \
             effective rank | min step rank (2nd half) | max DI (2nd half) |\n|{}\n",
            names.join(" | "),
            "---|".repeat(names.len() + 8)
        );
        for (values, group) in groups(rows) {
            let of = |f: fn(&RunFigures) -> f64| {
                mean_std(&group.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let secs = group.iter().map(|r| r.train_seconds).fold(0.0, f64::max);
            let ((p, ps), (k, ks), (e, es)) =
                (of(|r| r.probe), of(|r| r.knn), of(|r| r.effective_rank));
            let opt = |v: Option<f64>, d: usize| v.map_or("-".into(), |v| format!("{v:.d$}"));
            let min_rank = group
                .iter()
                .filter_map(|r| r.min_step_rank)
                .reduce(f64::min);
            let max_di = group.iter().filter_map(|r| r.max_late_di).reduce(f64::max);
            out += &format!(
                "| {} | `{}` | {} | {secs:.0} | {p:.2} ± {ps:.2} | {k:.2} ± {ks:.2} | \
                 {e:.1} ± {es:.1} | {} | {} |\n",
                values.join(" | "),
                group[0].method,
                group.len(),
                opt(min_rank, 1),
                opt(max_di, 3),
            );
        }
        out
    }

    /// `plots/<metric>_vs_<axis>.png` for the probe, kNN and effective rank against each axis:
    /// one band (mean ± standard deviation over seeds) per combination of the other axes'
    /// values. Values that are not all numbers are placed at their positions 0, 1, 2, ...
    fn plots(&self, rows: &[(Vec<String>, RunFigures)]) -> Result<()> {
        let dir = self.out.join("plots");
        std::fs::create_dir_all(&dir).map_err(CliError::io(&dir))?;
        let grouped = groups(rows);
        for (a, axis) in self.axes.iter().enumerate() {
            let numeric: Option<Vec<f64>> =
                axis.values.iter().map(|v| v.parse::<f64>().ok()).collect();
            let x_of = |v: &str| -> f64 {
                let i = axis.values.iter().position(|w| w == v).unwrap_or(0);
                numeric.as_ref().map_or(i as f64, |xs| xs[i])
            };
            for (file, label, metric) in METRICS {
                // One band per combination of the other axes.
                let mut bands: Vec<(String, Vec<MeanStd>)> = Vec::new();
                for (values, group) in &grouped {
                    let others: Vec<String> = self
                        .axes
                        .iter()
                        .zip(values)
                        .enumerate()
                        .filter(|(j, _)| *j != a)
                        .map(|(_, (ax, v))| format!("{}={v}", ax.name()))
                        .collect();
                    let name = match others.is_empty() {
                        true => "mean ± std over seeds".to_string(),
                        false => others.join(", "),
                    };
                    let (m, s) = mean_std(&group.iter().map(|r| metric(r)).collect::<Vec<_>>());
                    let point = (x_of(&values[a]), m, s);
                    match bands.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, pts)) => pts.push(point),
                        None => bands.push((name, vec![point])),
                    }
                }
                let bands: Vec<Band> = bands
                    .iter()
                    .map(|(name, pts)| {
                        let mut points = pts.clone();
                        points.sort_by(|p, q| p.0.total_cmp(&q.0));
                        Band { name, points }
                    })
                    .collect();
                let x_label = match numeric {
                    Some(_) => axis.name(),
                    None => format!("{} ({})", axis.name(), axis.values.join(", ")),
                };
                band_chart(
                    &dir.join(format!("{file}_vs_{}.png", axis.name())),
                    &format!("{label} against {}", axis.name()),
                    &x_label,
                    label,
                    &bands,
                )?;
            }
        }
        Ok(())
    }
}

/// (x, mean, standard deviation) of one plotted point.
type MeanStd = (f64, f64, f64);

/// A plotted figure: file stem, axis label, and how to read it from a run.
type Metric = (&'static str, &'static str, fn(&RunFigures) -> f64);

/// The figures plotted against each swept setting (the paper's Figure 7 form).
const METRICS: [Metric; 3] = [
    ("probe_top1", "linear probe top-1 (%)", |r| r.probe),
    ("knn_top1", "kNN top-1 (%)", |r| r.knn),
    ("effective_rank", "effective rank", |r| r.effective_rank),
];

/// The rows grouped by grid point, in their order of appearance.
fn groups(rows: &[(Vec<String>, RunFigures)]) -> Vec<(Vec<String>, Vec<&RunFigures>)> {
    let mut out: Vec<(Vec<String>, Vec<&RunFigures>)> = Vec::new();
    for (values, f) in rows {
        match out.iter_mut().find(|(v, _)| v == values) {
            Some((_, g)) => g.push(f),
            None => out.push((values.clone(), vec![f])),
        }
    }
    out
}

/// The settings in which a run folder's run differs from `config` (none for a new folder).
fn changed_settings(dir: &Path, config: &ImageRunConfig) -> Result<Vec<String>> {
    let path = dir.join("config.toml");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    ImageRunConfig::load(&path)?.differences(config)
}

/// Whether a run folder holds a finished, evaluated run.
fn finished(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| {
            v.pointer("/linear_probe/top1")
                .and_then(|t| t.as_f64())
                .is_some()
        })
}
