//! Command-line arguments of `vlgo` (`vlgo --help`, `vlgo <COMMAND> --help`), on clap.
//!
//! Parsing also resolves and validates every setting, so that a bad value is reported (exit
//! status 2) before any work starts.

// The argument structs' doc comments are the commands' help text, written for a terminal
// (`seed<N>`, `[probe]`), not as rustdoc markup.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use manifoldclr::semisup::SemisupMethod;

use crate::diagnostics::Diagnostic;
use crate::error::{CliError, Result};
use crate::pretrain::ImageRunConfig;
pub use crate::settings::set;
use crate::swiss_roll::{Study, SwissRollConfig};

/// The command line as clap reads it: `vlgo [--backend NAME] [COMMAND] [OPTIONS]`.
#[derive(Parser, Debug)]
#[command(
    name = "vlgo",
    version,
    about = "Manifold contrastive learning with variational Lie group operators: the paper's \
             experiments, their diagnostics and tables",
    after_help = "Without a command, vlgo runs swiss-roll, whose options may follow directly \
                  (vlgo --epochs 50). `vlgo <COMMAND> --help` lists a command's options."
)]
pub struct Cli {
    /// The Burn backend every command runs on: flex (the default), ndarray, and wgpu or cuda
    /// when built with `--features wgpu` / `--features cuda`; the VLGO_BACKEND variable sets it
    /// too (the flag wins). Recorded as `backend` in summary.json
    #[arg(long, global = true, value_name = "NAME")]
    pub backend: Option<String>,
    /// What to run.
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// The swiss-roll experiment (the default): FISTA against variational operators
    SwissRoll(SwissRollArgs),
    /// Contrastive pre-training of a ResNet-18 on images, then its evaluation
    Pretrain(PretrainArgs),
    /// Linear probe of a pre-trained run's frozen features (updates its summary.json)
    Probe(RunArgs),
    /// kNN evaluation of a pre-trained run (updates its summary.json)
    Knn(RunArgs),
    /// ManifoldCLR runs: probe accuracy on clean and prior-moved test features
    Identity(RunArgs),
    /// ManifoldCLR runs: per-class mean |c| of prior samples (a heat map)
    Coefficients(RunArgs),
    /// ManifoldCLR runs: prior samples shown as their nearest training images
    Neighbours(RunArgs),
    /// ManifoldCLR runs: paths expm(t Psi_m) z of the largest generators
    Paths(RunArgs),
    /// A markdown table of finished runs by method (mean and spread over seeds)
    Compare(CompareArgs),
    /// Pre-training runs over a grid of settings and seeds, their table and plots
    Sweep(SweepArgs),
    /// Semi-supervised classification with few labels on a run's frozen features
    Semisup(SemisupCliArgs),
    /// A tour of the core API: operators, transport, gradients
    Demo,
}

/// `vlgo swiss-roll`.
#[derive(Args, Debug, Default)]
pub struct SwissRollArgs {
    /// The paper's 1000 epochs (default: a reduced run of 200)
    #[arg(long)]
    pub full: bool,
    /// Run folder (default: runs/swiss-roll[-full]-seed<N>, never overwritten)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed of data, initialisation and noise (default 0)
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Override the number of epochs
    #[arg(long, value_name = "N")]
    pub epochs: Option<usize>,
    /// Points on the roll (default 5000)
    #[arg(long, value_name = "N")]
    pub points: Option<usize>,
    /// Partners from the k1-th.. nearest neighbours (default 20)
    #[arg(long, value_name = "N")]
    pub k1: Option<usize>,
    /// ..to the k2-th nearest neighbours (default 60)
    #[arg(long, value_name = "N")]
    pub k2: Option<usize>,
    /// Methods to run: fista, laplace_j<J>, thresholded_j<J>
    #[arg(long, value_name = "A,B,..", value_delimiter = ',')]
    pub methods: Option<Vec<String>>,
    /// Any other setting of the resolved config.toml (repeatable; applied after the options
    /// above), e.g. --set encoder_lr=3e-3 --set prior.scale=0.05
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// One run per value (repeatable: every combination), into --out DIR (default:
    /// runs/swiss-roll[-full]-seed<N>-grid-<names>); linked settings move together:
    /// --grid beta:prior.scale=5e-3:0.01,5e-4:1e-3. Each method is trained once per setting
    /// that matters to it; an interrupted grid resumes; writes study.md: the paper's four
    /// conclusions per regime
    #[arg(long = "grid", value_name = "KEY=V1,V2")]
    pub grids: Vec<String>,
}

/// `vlgo pretrain`.
#[derive(Args, Debug)]
pub struct PretrainArgs {
    /// The run's settings, e.g. configs/fashion-mnist-simclr-mlp-cpu.toml
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The data set's folder (Fashion-MNIST: the Debian package's by default)
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Run folder (default: runs/<config name>-seed<N>, never overwritten)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Continue the run folder's checkpoint with its own settings (--out names it; its
    /// config.toml, changed by --set, each change named; a --config holding other settings is
    /// refused)
    #[arg(long)]
    pub resume: bool,
    /// Any setting of the config (repeatable), e.g. --set pretrain.epochs=2
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Devices that share every batch (data parallelism; as --set pretrain.devices=N): the
    /// first N GPUs of the backend's kind, or N threads on a CPU backend
    #[arg(long, value_name = "N")]
    pub devices: Option<usize>,
}

/// The commands on one run folder.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The run folder of a pre-training run; the settings are those of its config.toml
    /// ([probe], knn_k, baselines, [diagnostics]), which may be edited; results are written
    /// into the run folder
    #[arg(long, value_name = "DIR")]
    pub run: PathBuf,
}

/// `vlgo compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Run folders (all that follow), e.g. runs/fashion-mnist-*
    #[arg(long, value_name = "DIR", num_args = 1.., required = true)]
    pub runs: Vec<PathBuf>,
}

/// `vlgo sweep`.
#[derive(Args, Debug)]
pub struct SweepArgs {
    /// The settings every run starts from
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A swept setting and its values (repeatable: the grid of all combinations), e.g.
    /// --grid pretrain.model.manifold.lambda=1,10,100
    #[arg(long = "grid", value_name = "KEY=V1,V2")]
    pub grids: Vec<String>,
    /// Seeds of every grid point (default: the config's seed)
    #[arg(long, value_name = "S1,S2,..", value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Any other setting (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// The data set's folder
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The sweep's folder (default: runs/<config name>-sweep-<keys>); run again, a sweep skips
    /// finished runs and resumes stopped ones; it ends with sweep.md and
    /// plots/<metric>_vs_<key>.png
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `vlgo semisup`.
#[derive(Args, Debug)]
pub struct SemisupCliArgs {
    /// A pre-training run folder; results go to DIR/semisup/ (an interrupted run resumes from
    /// its results.jsonl)
    #[arg(long, value_name = "DIR", required_unless_present = "bench")]
    pub run: Option<PathBuf>,
    /// Labels per class, one experiment each
    #[arg(
        long,
        value_name = "K1,K2,..",
        value_delimiter = ',',
        default_value = "5"
    )]
    pub labels: Vec<usize>,
    /// Random label splits per experiment (the paper's 50)
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub splits: usize,
    /// ce-only, pseudo-label, mm-ict, featmatch, vlgo (default: all; vlgo only on a run with a
    /// learned prior)
    #[arg(long, value_name = "A,B,..", value_delimiter = ',')]
    pub methods: Option<Vec<String>>,
    /// Iterations per split (default 5000; FeatMatch twice as many)
    #[arg(long, value_name = "N")]
    pub iterations: Option<usize>,
    /// Any semisup.* setting of the run's config (repeatable), e.g. --set semisup.confidence=0.7
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Time the trainer on synthetic 128-d features instead: one split and
    /// max(4, semisup.splits_at_once) splits at once, iterations/s per split (--iterations,
    /// default 200)
    #[arg(long)]
    pub bench: bool,
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Print this text (help or version) and exit successfully.
    Help(String),
    /// The core demo.
    Demo,
    /// The swiss-roll experiment with its resolved settings and run folder.
    SwissRoll {
        /// Settings.
        config: Box<SwissRollConfig>,
        /// Run folder (None: the default name).
        out: Option<PathBuf>,
        /// Whether `--full` was given (names the default folder).
        full: bool,
    },
    /// The swiss-roll experiment over a grid of settings.
    SwissRollGrid(Box<Study>),
    /// Image pre-training.
    Pretrain {
        /// Settings.
        config: Box<ImageRunConfig>,
        /// Run folder.
        out: PathBuf,
        /// Continue the folder's checkpoint.
        resume: bool,
    },
    /// Evaluation of a run: the linear probe (`probe`) or kNN.
    Evaluate {
        /// The run folder.
        run: PathBuf,
        /// Probe (true) or kNN (false).
        probe: bool,
    },
    /// The table of several runs.
    Compare {
        /// Their folders.
        runs: Vec<PathBuf>,
    },
    /// A grid of pre-training runs.
    Sweep(Box<crate::sweep::Sweep>),
    /// Semi-supervised classification on a run's features.
    Semisup(Box<crate::semisup::SemisupArgs>),
    /// A ManifoldCLR diagnostic of a run.
    Diagnose {
        /// The run folder.
        run: PathBuf,
        /// Which one.
        what: Diagnostic,
    },
}

/// Reads the arguments after the program name: the backend named by `--backend` (unchecked;
/// None when not given) and the command with its settings resolved and validated. Help and
/// version come back as [`Command::Help`]; a malformed command line is [`CliError::Usage`].
///
/// ```
/// use vlgo::args::{Command, parse};
/// let args = ["--backend", "ndarray", "compare", "--runs", "a", "b"].map(String::from);
/// let (backend, command) = parse(&args).unwrap();
/// assert_eq!(backend.as_deref(), Some("ndarray"));
/// assert_eq!(command, Command::Compare { runs: vec!["a".into(), "b".into()] });
/// let (_, help) = parse(&["pretrain", "--help"].map(String::from)).unwrap();
/// assert!(matches!(help, Command::Help(text) if text.contains("--resume")));
/// ```
pub fn parse(args: &[String]) -> Result<(Option<String>, Command)> {
    let cli = match Cli::try_parse_from(with_default_command(args)) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => return Ok((None, Command::Help(e.render().to_string()))),
        Err(e) => return Err(CliError::Usage(e.render().to_string())),
    };
    let command = match cli.command {
        None => swiss_roll(SwissRollArgs::default())?,
        Some(cmd) => resolve(cmd)?,
    };
    Ok((cli.backend, command))
}

/// `vlgo OPTIONS` is `vlgo swiss-roll OPTIONS`: the program name, then "swiss-roll" before the
/// first argument that is neither `--backend NAME` nor help or version.
fn with_default_command(args: &[String]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec!["vlgo".into()];
    let mut i = 0;
    while i < args.len() && args[i] == "--backend" {
        out.extend(args[i..(i + 2).min(args.len())].iter().map(OsString::from));
        i += 2;
    }
    if let Some(first) = args.get(i)
        && first.starts_with('-')
        && !["-h", "--help", "-V", "--version"].contains(&first.as_str())
    {
        out.push("swiss-roll".into());
    }
    out.extend(args[i.min(args.len())..].iter().map(OsString::from));
    out
}

fn resolve(cmd: Cmd) -> Result<Command> {
    let diagnose = |run: RunArgs, what: Diagnostic| Ok(Command::Diagnose { run: run.run, what });
    match cmd {
        Cmd::SwissRoll(a) => swiss_roll(a),
        Cmd::Pretrain(a) => pretrain(a),
        Cmd::Probe(a) => Ok(Command::Evaluate {
            run: a.run,
            probe: true,
        }),
        Cmd::Knn(a) => Ok(Command::Evaluate {
            run: a.run,
            probe: false,
        }),
        Cmd::Identity(a) => diagnose(a, Diagnostic::Identity),
        Cmd::Coefficients(a) => diagnose(a, Diagnostic::Coefficients),
        Cmd::Neighbours(a) => diagnose(a, Diagnostic::Neighbours),
        Cmd::Paths(a) => diagnose(a, Diagnostic::Paths),
        Cmd::Compare(a) => Ok(Command::Compare { runs: a.runs }),
        Cmd::Sweep(a) => sweep(a),
        Cmd::Semisup(a) => semisup(a),
        Cmd::Demo => Ok(Command::Demo),
    }
}

fn swiss_roll(a: SwissRollArgs) -> Result<Command> {
    let mut config = match a.full {
        true => SwissRollConfig::full(),
        false => SwissRollConfig::reduced(),
    };
    config.seed = a.seed.unwrap_or(config.seed);
    config.epochs = a.epochs.unwrap_or(config.epochs);
    config.points = a.points.unwrap_or(config.points);
    config.k1 = a.k1.unwrap_or(config.k1);
    config.k2 = a.k2.unwrap_or(config.k2);
    if let Some(methods) = a.methods {
        config.methods = methods.iter().map(|m| m.trim().to_string()).collect();
    }
    for s in &a.sets {
        config = set(&config, s)?;
    }
    config.validate()?;
    let axes = a
        .grids
        .iter()
        .map(|g| crate::sweep::Axis::parse(g))
        .collect::<Result<Vec<_>>>()?;
    if !axes.is_empty() {
        let out = a
            .out
            .unwrap_or_else(|| Study::default_out(a.full, config.seed, &axes));
        let study = Study {
            base: config,
            axes,
            out,
        };
        study.regimes()?;
        return Ok(Command::SwissRollGrid(Box::new(study)));
    }
    Ok(Command::SwissRoll {
        config: Box::new(config),
        out: a.out,
        full: a.full,
    })
}

fn pretrain(mut a: PretrainArgs) -> Result<Command> {
    if let Some(n) = a.devices {
        a.sets.push(format!("pretrain.devices={n}"));
    }
    if a.resume {
        let out = a.out.ok_or_else(|| {
            CliError::invalid(
                "--resume",
                "no --out",
                "--out naming the run folder to continue",
            )
        })?;
        let config = resumed_config(&out, a.config, &a.sets, a.data_dir)?;
        config.validate()?;
        return Ok(Command::Pretrain {
            config: Box::new(config),
            out,
            resume: true,
        });
    }
    let (path, config) =
        image_config(a.config, "a config file to train with", &a.sets, a.data_dir)?;
    config.validate()?;
    let out = a.out.unwrap_or_else(|| {
        let stem = path
            .file_stem()
            .map_or("run".into(), |s| s.to_string_lossy());
        PathBuf::from("runs").join(format!("{stem}-seed{}", config.pretrain.seed))
    });
    Ok(Command::Pretrain {
        config: Box::new(config),
        out,
        resume: false,
    })
}

/// The settings a resumed run continues with: its folder's `config.toml`, changed by `--set`
/// and `--data-dir`. A `--config` is only accepted when it holds the same settings: a resume
/// never trains on with a file's settings that the run did not start with, unnoticed.
fn resumed_config(
    out: &Path,
    config_path: Option<PathBuf>,
    sets: &[String],
    data_dir: Option<PathBuf>,
) -> Result<ImageRunConfig> {
    let stored_path = out.join("config.toml");
    if !stored_path.is_file() {
        return Err(CliError::invalid(
            "--resume",
            out.display(),
            "a run folder with its config.toml",
        ));
    }
    let stored = ImageRunConfig::load(&stored_path)?;
    if let Some(path) = config_path {
        let (_, given) = image_config(Some(path.clone()), "", sets, data_dir.clone())?;
        let changed = stored.differences(&given)?;
        if !changed.is_empty() {
            return Err(CliError::invalid(
                "--config on --resume",
                format!("{} ({})", path.display(), changed.join(", ")),
                format!(
                    "the settings the run started with ({}): leave out --config to continue \
                     with them, and change one with --set",
                    stored_path.display()
                ),
            ));
        }
    }
    overridden(stored, sets, data_dir)
}

fn sweep(a: SweepArgs) -> Result<Command> {
    let axes = a
        .grids
        .iter()
        .map(|g| crate::sweep::Axis::parse(g))
        .collect::<Result<Vec<_>>>()?;
    let (path, base) = image_config(a.config, "a config file to sweep", &a.sets, a.data_dir)?;
    let sweep = crate::sweep::Sweep {
        seeds: a.seeds.unwrap_or_else(|| vec![base.pretrain.seed]),
        out: a
            .out
            .unwrap_or_else(|| crate::sweep::Sweep::default_out(&path, &axes)),
        base,
        axes,
    };
    // Every run's settings are checked here, before any run starts.
    sweep.points()?;
    Ok(Command::Sweep(Box::new(sweep)))
}

fn semisup(a: SemisupCliArgs) -> Result<Command> {
    let methods = match a.methods {
        None => None,
        Some(names) => {
            let parsed = names
                .iter()
                .map(|s| Ok(s.trim().parse::<SemisupMethod>()?))
                .collect::<Result<Vec<_>>>()?;
            let distinct: std::collections::BTreeSet<_> = parsed.iter().collect();
            if distinct.len() != parsed.len() {
                return Err(CliError::invalid(
                    "--methods",
                    names.join(","),
                    "each method once",
                ));
            }
            Some(parsed)
        }
    };
    let mut sets = a.sets;
    if let Some(n) = a.iterations {
        sets.insert(0, format!("semisup.iterations={n}"));
    }
    if a.splits == 0 || a.labels.contains(&0) {
        return Err(CliError::invalid(
            "--splits / --labels",
            format!("{} splits of {:?} labels per class", a.splits, a.labels),
            "at least one split and one label per class",
        ));
    }
    let mut dedup = a.labels.clone();
    dedup.sort_unstable();
    dedup.dedup();
    if dedup.len() != a.labels.len() {
        return Err(CliError::invalid(
            "--labels",
            format!("{:?}", a.labels),
            "each count once",
        ));
    }
    Ok(Command::Semisup(Box::new(crate::semisup::SemisupArgs {
        run: a.run.unwrap_or_default(),
        labels: a.labels,
        splits: a.splits,
        methods,
        sets,
        bench: a.bench,
    })))
}

/// The image-run config of `--config` (`what` says why one is needed when it is missing), with
/// the `--set` overrides and `--data-dir` applied; not yet validated.
fn image_config(
    path: Option<PathBuf>,
    what: &str,
    sets: &[String],
    data_dir: Option<PathBuf>,
) -> Result<(PathBuf, ImageRunConfig)> {
    let path = path.ok_or_else(|| CliError::invalid("--config", "nothing", what))?;
    let config = overridden(ImageRunConfig::load(&path)?, sets, data_dir)?;
    Ok((path, config))
}

/// `config` with the `--set` overrides and `--data-dir` applied.
fn overridden(
    mut config: ImageRunConfig,
    sets: &[String],
    data_dir: Option<PathBuf>,
) -> Result<ImageRunConfig> {
    for s in sets {
        config = set(&config, s)?;
    }
    if data_dir.is_some() {
        config.data_dir = data_dir;
    }
    Ok(config)
}
