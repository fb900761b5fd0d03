//! `vlgo pretrain`, `vlgo probe` and `vlgo knn`: contrastive pre-training of a ResNet-18 on an
//! image data set, and the evaluation of its frozen features.

pub mod config;
pub mod data;

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use manifoldclr::{
    Accuracy, ContrastiveModel, Features, PretrainHooks, Pretrainer, ResNet18, StepLog,
    TrainBackend, extract_features, feature_spectrum, knn, linear_probe,
};
use serde_json::json;
use vlgo_core::layers::LayerBackend;

pub use config::{DiagnosticsConfig, ImageRunConfig};
use data::{AugmentedViews, ImageData, has_checkpoint, subset};

use crate::backend::{BackendName, OnBackend};
use crate::error::{CliError, Result};
use crate::plot::{Series, line_chart};
use crate::run_folder::{JsonLines, RunFolder};

/// Writes metrics, shows progress and runs the kNN monitor.
struct Hooks<'a, B: TrainBackend> {
    bar: ProgressBar,
    metrics: JsonLines,
    config: &'a ImageRunConfig,
    data: &'a ImageData,
    device: B::Device,
    /// (train seconds, kNN top-1) after each monitored epoch.
    curve: Vec<(f64, f64)>,
    rates: Vec<f64>,
}

impl<B: TrainBackend> PretrainHooks<B> for Hooks<'_, B> {
    fn step(&mut self, log: &StepLog) -> manifoldclr::Result<()> {
        self.bar.inc(1);
        self.bar.set_message(format!(
            "epoch {} loss {:.4} lr {:.2e} {:.0} img/s",
            log.epoch, log.loss_nce, log.lr, log.images_per_second
        ));
        self.rates.push(log.images_per_second);
        let line = serde_json::to_value(log).expect("a step log serialises");
        self.metrics.write(&line).map_err(to_clr)
    }

    fn epoch_end(&mut self, epoch: usize, model: &ContrastiveModel<B>) -> manifoldclr::Result<()> {
        let c = self.config;
        if c.knn_every == 0 || !epoch.is_multiple_of(c.knn_every) {
            return Ok(());
        }
        let backbone = burn::module::AutodiffModule::valid(&model.backbone);
        let acc = monitor_knn::<B::InnerBackend>(&backbone, self.data, c, &self.device)
            .map_err(to_clr)?;
        let seconds = self.bar.elapsed().as_secs_f64();
        self.curve.push((seconds, acc.top1));
        self.bar
            .println(format!("epoch {epoch}: kNN top-1 {:.2}%", acc.top1));
        self.metrics
            .write(
                &json!({"epoch": epoch, "knn_top1": acc.top1, "knn_top5": acc.top5,
                           "elapsed_seconds": seconds}),
            )
            .map_err(to_clr)
    }
}

fn to_clr(e: CliError) -> manifoldclr::ClrError {
    manifoldclr::ClrError::Checkpoint(e.to_string())
}

/// Features of every image of `set` under the evaluation transform.
pub(crate) fn embed<B: LayerBackend>(
    backbone: &ResNet18<B>,
    set: &vlgo_datasets::ImageSet,
    data: &ImageData,
    config: &ImageRunConfig,
    device: &B::Device,
) -> Result<Features> {
    let transform = data.eval_transform(config)?;
    let images = transform.all(set)?;
    let side = config.image_size.min(set.height.min(set.width));
    Ok(extract_features(
        backbone,
        &images,
        [set.channels, side, side],
        &set.labels,
        config.eval_batch,
        device,
    )?)
}

fn monitor_knn<B: LayerBackend>(
    backbone: &ResNet18<B>,
    data: &ImageData,
    config: &ImageRunConfig,
    device: &B::Device,
) -> Result<Accuracy> {
    let limit = |n: usize| match config.monitor_limit {
        0 => n,
        l => l.min(n),
    };
    let train = subset(&data.train, limit(data.train.len()));
    let test = subset(&data.test, limit(data.test.len()));
    let f_train = embed(backbone, &train, data, config, device)?;
    let f_test = embed(backbone, &test, data, config, device)?;
    let k = config.knn_k.min(f_train.len());
    Ok(knn::<B>(
        &f_train,
        &f_test,
        data.train.classes.len(),
        k,
        device,
    )?)
}

/// Raw evaluation inputs as features (the raw-pixel baseline).
fn pixels(
    set: &vlgo_datasets::ImageSet,
    data: &ImageData,
    config: &ImageRunConfig,
) -> Result<Features> {
    let transform = data.eval_transform(config)?;
    let values = transform.all(set)?;
    let dim = transform.view_len();
    Ok(Features::new(values, dim, set.labels.clone())?)
}

/// `vlgo pretrain`: trains, evaluates, writes the run folder; `resume` continues a run folder's
/// checkpoint instead of starting one, with `config` (settings that differ from the folder's
/// `config.toml` are named on stderr, and `config` becomes the folder's `config.toml`).
pub fn pretrain<B: TrainBackend>(
    config: &ImageRunConfig,
    out: &Path,
    resume: bool,
    device: &B::Device,
) -> Result<serde_json::Value> {
    config.validate()?;
    let data = ImageData::open(config)?;
    let checkpoints = out.join("checkpoints");
    let folder = if resume {
        if !has_checkpoint(&checkpoints) {
            return Err(CliError::invalid(
                "--resume",
                out.display(),
                "a run folder with a checkpoint (checkpoints/state.json)",
            ));
        }
        let folder = RunFolder::existing(out)?;
        let stored = out.join("config.toml");
        if stored.is_file() {
            let changed = ImageRunConfig::load(&stored)?.differences(config)?;
            if !changed.is_empty() {
                eprintln!(
                    "{}: resuming with settings changed from its config.toml: {}",
                    out.display(),
                    changed.join(", ")
                );
            }
        }
        folder
    } else {
        RunFolder::create(out)?
    };
    let mut resolved = config.clone();
    resolved.data_dir = Some(data.dir.clone());
    folder.write_toml("config.toml", &resolved)?;
    let augment = data.augment(config)?;
    let views = AugmentedViews {
        set: &data.train,
        extra: data
            .extra
            .as_ref()
            .map(|(file, count)| (file.as_ref(), *count)),
        augment: &augment,
        seed: config.pretrain.seed,
        size: config.image_size,
    };
    let mut trainer = if resume {
        Pretrainer::<B>::resume(config.pretrain.clone(), &checkpoints, device)?
    } else {
        Pretrainer::<B>::new(config.pretrain.clone(), device)?
    };
    let per_epoch = data.train.len() / config.pretrain.batch_size;
    let total = (per_epoch * config.pretrain.epochs) as u64;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] {pos}/{len} steps {per_sec} eta {eta} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(config.pretrain.model.method.to_string());
    bar.set_position(trainer.state.steps_done as u64);
    let mut hooks = Hooks::<B> {
        bar,
        metrics: if resume {
            folder.jsonl_append("metrics.jsonl")?
        } else {
            folder.jsonl("metrics.jsonl")?
        },
        config,
        data: &data,
        device: device.clone(),
        curve: Vec::new(),
        rates: Vec::new(),
    };
    match config.pretrain.devices {
        1 => trainer.run(&views, &checkpoints, &mut hooks, device)?,
        n => {
            let devices = manifoldclr::distributed::devices_like::<B>(device, n)?;
            trainer.run_on(&views, &checkpoints, &mut hooks, &devices)?
        }
    }
    hooks.bar.finish();
    let curve = hooks.curve.clone();
    let mean_rate = if hooks.rates.is_empty() {
        f64::NAN
    } else {
        hooks.rates.iter().sum::<f64>() / hooks.rates.len() as f64
    };
    let mut summary = json!({
        "dataset": config.dataset,
        "method": config.pretrain.model.method.to_string(),
        "train_seconds": trainer.state.train_seconds,
        "images_per_second": mean_rate,
        "epochs": trainer.state.epochs_done,
        "backend": B::name(device),
        "device": format!("{device:?}"),
    });
    evaluate::<B>(
        &trainer.eval_backbone(),
        &data,
        config,
        [true, true],
        &mut summary,
        device,
    )?;
    if config.baselines {
        baselines::<B>(&data, config, &mut summary, device)?;
    }
    folder.write_json("summary.json", &summary)?;
    if !curve.is_empty() {
        let plots = folder.plots_dir()?;
        line_chart(
            &plots.join("knn_accuracy.png"),
            "kNN top-1 during pre-training",
            "seconds",
            "top-1 (%)",
            &[Series {
                name: "kNN top-1",
                points: curve,
            }],
            false,
        )?;
    }
    Ok(summary)
}

/// The two baselines of `summary.json` (`baselines.raw_pixels`, `baselines.random_init`): the
/// linear probe, with the run's probe settings, on the evaluation-transformed pixels and on the
/// features of the backbone as initialised (same seed, never trained).
fn baselines<B: TrainBackend>(
    data: &ImageData,
    config: &ImageRunConfig,
    summary: &mut serde_json::Value,
    device: &B::Device,
) -> Result<()> {
    eprintln!("baselines: raw pixels and the randomly initialised backbone");
    let classes = data.train.classes.len();
    let raw = linear_probe::<B>(
        &pixels(&data.train, data, config)?,
        &pixels(&data.test, data, config)?,
        classes,
        &config.probe,
        device,
    )?;
    let random = Pretrainer::<B>::new(config.pretrain.clone(), device)?.eval_backbone();
    let f_train = embed(&random, &data.train, data, config, device)?;
    let f_test = embed(&random, &data.test, data, config, device)?;
    let rand_acc = linear_probe::<B>(&f_train, &f_test, classes, &config.probe, device)?;
    summary["baselines"] = json!({
        "raw_pixels": {"top1": raw.top1, "top5": raw.top5},
        "random_init": {"top1": rand_acc.top1, "top5": rand_acc.top5},
    });
    Ok(())
}

/// The kNN (`which[0]`) and the linear probe (`which[1]`) of a backbone's frozen features, into
/// `summary`.
fn evaluate<B: TrainBackend>(
    backbone: &ResNet18<B::InnerBackend>,
    data: &ImageData,
    config: &ImageRunConfig,
    which: [bool; 2],
    summary: &mut serde_json::Value,
    device: &B::Device,
) -> Result<()> {
    eprintln!(
        "embedding {} + {} images",
        data.train.len(),
        data.test.len()
    );
    let f_train = embed(backbone, &data.train, data, config, device)?;
    let f_test = embed(backbone, &data.test, data, config, device)?;
    let classes = data.train.classes.len();
    // Of the test features: what the probe and kNN are scored on.
    let spectrum = feature_spectrum(&f_test)?;
    summary["effective_rank"] = json!(spectrum.effective_rank);
    summary["feature_entropy"] = json!(spectrum.entropy);
    if which[0] {
        let k = config.knn_k.min(f_train.len());
        let acc = knn::<B::InnerBackend>(&f_train, &f_test, classes, k, device)?;
        summary["knn"] = json!({"k": k, "top1": acc.top1, "top5": acc.top5});
    }
    if which[1] {
        eprintln!("linear probe: {} epochs", config.probe.epochs);
        let acc = linear_probe::<B>(&f_train, &f_test, classes, &config.probe, device)?;
        summary["linear_probe"] = json!({"top1": acc.top1, "top5": acc.top5});
    }
    Ok(())
}

/// `vlgo probe --run DIR` (`probe`) and `vlgo knn --run DIR`: evaluates the run's last checkpoint
/// with the settings of the run's `config.toml` and updates its `summary.json` (the probe also
/// re-measures the baselines when the config asks for them).
pub fn evaluate_run<B: TrainBackend>(
    run: &Path,
    probe: bool,
    device: &B::Device,
) -> Result<serde_json::Value> {
    let config = ImageRunConfig::load(&run.join("config.toml"))?;
    config.validate()?;
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
    let folder = RunFolder::existing(run)?;
    let mut summary = folder.summary()?;
    let which = [!probe, probe];
    evaluate::<B>(
        &trainer.eval_backbone(),
        &data,
        &config,
        which,
        &mut summary,
        device,
    )?;
    // The baselines are only comparable when probed with the same settings, which the run's
    // config.toml may have changed since pre-training.
    if probe && config.baselines {
        baselines::<B>(&data, &config, &mut summary, device)?;
    }
    folder.write_json("summary.json", &summary)?;
    Ok(summary)
}

/// [`run_example`] on the backend named by `--backend NAME` among the arguments, else by
/// `VLGO_BACKEND`, else the default: what the per-dataset examples call.
pub fn example(config: &str) -> Result<serde_json::Value> {
    struct Example<'a>(&'a str);
    impl OnBackend for Example<'_> {
        type Output = serde_json::Value;
        fn run<B: TrainBackend>(self, device: &B::Device) -> Result<serde_json::Value> {
            run_example::<B>(self.0, device)
        }
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (backend, _) = BackendName::from_args(&args, std::env::var("VLGO_BACKEND").ok())?;
    backend.run(Example(config))
}

/// The command line of the per-dataset examples, `[--backend NAME] [DATA_DIR] [OUT_DIR]
/// [KEY=VALUE ...]`, on the shipped config `configs/<config>.toml`: pre-trains into OUT_DIR
/// (default `runs/example-<config>`) on `B`, evaluates, and returns the summary.
pub fn run_example<B: TrainBackend>(config: &str, device: &B::Device) -> Result<serde_json::Value> {
    // `--backend NAME` is not a path: it chose the backend already (see `example`).
    let (_, args) = BackendName::split_args(&std::env::args().skip(1).collect::<Vec<_>>())?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(format!("{config}.toml"));
    let mut resolved = ImageRunConfig::load(&path)?;
    let (paths, sets): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| !a.contains('='));
    if let Some(dir) = paths.first() {
        resolved.data_dir = Some(dir.into());
    }
    for s in sets {
        resolved = crate::settings::set(&resolved, s)?;
    }
    let out = paths
        .get(1)
        .map_or(format!("runs/example-{config}"), |p| p.to_string());
    pretrain::<B>(&resolved, out.as_ref(), false, device)
}
