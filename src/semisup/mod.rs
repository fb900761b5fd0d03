//! `vlgo semisup`: semi-supervised classification with few labels on a pre-trained run's frozen
//! features, the learned prior's samples as feature augmentations against the baselines
//! (`docs/semisup.md`). Everything is written into `<run>/semisup/`.

pub mod bench;
pub mod cache;
pub mod report;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::AutodiffModule;
use indicatif::{ProgressBar, ProgressStyle};
use manifoldclr::semisup::{
    PriorAugment, SemisupConfig, SemisupMethod, SemisupSet, SplitOutcome, train_splits,
};
use manifoldclr::{Features, Pretrainer, TrainBackend, TrainState};
use serde::{Deserialize, Serialize};

use crate::error::{CliError, Result};
use crate::pretrain::data::{ImageData, has_checkpoint};
use crate::pretrain::{ImageRunConfig, embed};
use crate::run_folder::RunFolder;

/// What `vlgo semisup` was asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct SemisupArgs {
    /// The run folder.
    pub run: PathBuf,
    /// Labels per class, one experiment each.
    pub labels: Vec<usize>,
    /// Label splits per experiment.
    pub splits: usize,
    /// Methods; None: every method the run supports (`vlgo` only with a learned prior).
    pub methods: Option<Vec<SemisupMethod>>,
    /// `--set` overrides of the run config (`semisup.*` keys), `--iterations` among them.
    pub sets: Vec<String>,
    /// `--bench`: time the trainer on synthetic features instead (no run folder).
    pub bench: bool,
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultLine {
    /// Labels per class.
    pub labels_per_class: usize,
    /// The method's name.
    pub method: SemisupMethod,
    /// The split.
    pub split: u64,
    /// The settings' seed.
    pub seed: u64,
    /// Test accuracy, %.
    pub accuracy: f64,
    /// Iterations trained.
    pub iterations: usize,
    /// Wall seconds of the split (its share of the batch of splits it trained in).
    pub seconds: f64,
    /// Mean share of confident pseudo-labels, where the method has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confident_fraction: Option<f64>,
}

/// The run's settings with the overrides, checked.
fn settings(args: &SemisupArgs) -> Result<ImageRunConfig> {
    let path = args.run.join("config.toml");
    let mut config = ImageRunConfig::load(&path)?;
    for s in &args.sets {
        config = crate::settings::set(&config, s)?;
    }
    config.validate()?;
    config.semisup.validate()?;
    Ok(config)
}

/// Reads `results.jsonl` (absent: none); a damaged line is an error naming it, and the file is
/// left as it is.
fn read_results(path: &Path) -> Result<Vec<ResultLine>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CliError::io(path)(e)),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                CliError::invalid(
                    "results.jsonl",
                    format!("{} line {}", path.display(), i + 1),
                    format!("a result line ({e}); the file was left unchanged"),
                )
            })
        })
        .collect()
}

/// The trainer's settings as they decide results (the batching of splits does not).
fn result_settings(config: &SemisupConfig) -> serde_json::Value {
    let mut v = serde_json::to_value(config).expect("settings serialise");
    v.as_object_mut()
        .expect("an object")
        .remove("splits_at_once");
    v
}

/// Checks that earlier results in the folder came from the same settings, or records them.
fn check_settings(folder: &RunFolder, config: &SemisupConfig) -> Result<()> {
    let path = folder.path().join("settings.json");
    let now = result_settings(config);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let before: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                CliError::invalid("settings.json", path.display(), format!("valid JSON: {e}"))
            })?;
            if before != now {
                return Err(CliError::invalid(
                    "semisup settings",
                    now,
                    format!(
                        "the settings of the results already in {} ({before}); move that \
                         folder away to start again with new settings",
                        folder.path().display()
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            folder.write_json("settings.json", &now)
        }
        Err(e) => Err(CliError::io(path)(e)),
    }
}

/// Runs the experiments of `args`, resuming from `results.jsonl`, and writes the summary, the
/// table and the plots. Returns `summary.json`'s content.
pub fn run<B: TrainBackend>(args: &SemisupArgs, device: &B::Device) -> Result<serde_json::Value> {
    let config = settings(args)?;
    let checkpoints = args.run.join("checkpoints");
    if !has_checkpoint(&checkpoints) {
        return Err(CliError::invalid(
            "--run",
            args.run.display(),
            "a run folder with a checkpoint (checkpoints/state.json)",
        ));
    }
    let learned_prior = config.pretrain.model.method.uses_operators();
    let methods = match &args.methods {
        Some(m) => m.clone(),
        None => SemisupMethod::ALL
            .into_iter()
            .filter(|&m| m != SemisupMethod::Vlgo || learned_prior)
            .collect(),
    };
    if methods.contains(&SemisupMethod::Vlgo) && !learned_prior {
        return Err(CliError::invalid(
            "--methods",
            format!("vlgo on a {} run", config.pretrain.model.method),
            "a run with a learned prior (manifoldclr-mlp, manifoldclr or manifold-directclr); \
             the other methods run on any run",
        ));
    }
    let state: TrainState = {
        let path = checkpoints.join("state.json");
        let text = std::fs::read_to_string(&path).map_err(CliError::io(&path))?;
        serde_json::from_str(&text).map_err(|e| {
            CliError::invalid(
                "checkpoint state",
                path.display(),
                format!("valid JSON: {e}"),
            )
        })?
    };
    let folder = RunFolder::existing(&args.run)?;
    let out_dir = args.run.join("semisup");
    std::fs::create_dir_all(&out_dir).map_err(CliError::io(&out_dir))?;
    let out = RunFolder::existing(&out_dir)?;
    check_settings(&out, &config.semisup)?;
    let results_path = out_dir.join("results.jsonl");
    let mut done = read_results(&results_path)?;
    let finished: BTreeSet<(usize, SemisupMethod, u64)> = done
        .iter()
        .map(|r| (r.labels_per_class, r.method, r.split))
        .collect();
    let todo: Vec<(usize, SemisupMethod, Vec<u64>)> = args
        .labels
        .iter()
        .flat_map(|&k| methods.iter().map(move |&m| (k, m)))
        .map(|(k, m)| {
            let splits = (0..args.splits as u64)
                .filter(|s| !finished.contains(&(k, m, *s)))
                .collect();
            (k, m, splits)
        })
        .filter(|(_, _, s): &(usize, SemisupMethod, Vec<u64>)| !s.is_empty())
        .collect();

    // The model is needed to embed (once) and for the prior.
    let cache_path = out_dir.join("features.bin");
    let cached = cache::read(&cache_path, state.steps_done as u64)?;
    let needs_model = cached.is_none() || todo.iter().any(|(_, m, _)| *m == SemisupMethod::Vlgo);
    let model = match needs_model {
        true => Some(
            Pretrainer::<B>::resume(config.pretrain.clone(), &checkpoints, device)?
                .model
                .valid(),
        ),
        false => None,
    };
    let (train, test) = match cached {
        Some((train, test)) => (train, test),
        None => {
            let data = ImageData::open(&config)?;
            let model = model
                .as_ref()
                .unwrap_or_else(|| unreachable!("loaded above"));
            eprintln!(
                "semisup: embedding {} + {} images (cached in {})",
                data.train.len(),
                data.test.len(),
                cache_path.display()
            );
            let train = embed(&model.backbone, &data.train, &data, &config, device)?;
            let test = embed(&model.backbone, &data.test, &data, &config, device)?;
            cache::write(&cache_path, state.steps_done as u64, &train, &test)?;
            (train, test)
        }
    };
    let classes = classes_of(&train, &test);
    let set = SemisupSet::new(&train, &test, classes)?;
    let prior = match model.as_ref().and_then(|m| m.vlgo.as_ref()) {
        Some(v) if learned_prior => Some(PriorAugment::new(v)?),
        _ => None,
    };
    // Every split is checked before the first trains (labels per class against the classes).
    for &k in &args.labels {
        manifoldclr::semisup::label_split(&train.labels, classes, k, config.semisup.seed, 0)?;
    }

    let total: u64 = todo
        .iter()
        .map(|(_, m, s)| (config.semisup.iterations_of(*m) * s.len()) as u64)
        .sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>22} [{bar:30}] {pos}/{len} split-iterations {per_sec:>14} eta {eta:>5}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut lines = out.jsonl_append("results.jsonl")?;
    for (k, method, splits) in &todo {
        for chunk in splits.chunks(config.semisup.splits_at_once) {
            bar.set_prefix(format!("{k} labels {method}"));
            let start = Instant::now();
            let base = bar.position();
            let s = chunk.len() as u64;
            let outcomes: Vec<SplitOutcome> = train_splits::<B>(
                *method,
                &config.semisup,
                &set,
                *k,
                chunk,
                prior.as_ref(),
                device,
                &mut |it| bar.set_position(base + it as u64 * s),
            )?;
            let seconds = start.elapsed().as_secs_f64() / chunk.len() as f64;
            for o in outcomes {
                let line = ResultLine {
                    labels_per_class: *k,
                    method: *method,
                    split: o.split,
                    seed: config.semisup.seed,
                    accuracy: o.accuracy,
                    iterations: o.iterations,
                    seconds,
                    confident_fraction: o.confident_fraction,
                };
                lines.write(&serde_json::to_value(&line).expect("a line serialises"))?;
                done.push(line);
            }
        }
    }
    bar.finish_and_clear();
    // The summary covers every result in the folder, from this call and earlier ones.
    let all_labels: Vec<usize> = done
        .iter()
        .map(|r| r.labels_per_class)
        .chain(args.labels.iter().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let all_methods: Vec<SemisupMethod> = SemisupMethod::ALL
        .into_iter()
        .filter(|m| methods.contains(m) || done.iter().any(|r| r.method == *m))
        .collect();
    let summary = report::write(&out, &done, &all_labels, &all_methods)?;
    folder.update_summary("semisup", &summary)?;
    Ok(summary)
}

/// Classes seen in either set (labels are 0-based).
fn classes_of(train: &Features, test: &Features) -> usize {
    train
        .labels
        .iter()
        .chain(&test.labels)
        .map(|&l| usize::from(l) + 1)
        .max()
        .unwrap_or(0)
}
