//! Command-line arguments of `vlgo` (`vlgo --help`).

use std::path::{Path, PathBuf};

use manifoldclr::semisup::SemisupMethod;

use crate::diagnostics::Diagnostic;
use crate::error::{CliError, Result};
use crate::pretrain::ImageRunConfig;
pub use crate::settings::set;
use crate::swiss_roll::{Study, SwissRollConfig};

/// Usage text.
pub const USAGE: &str = "\
usage: vlgo [--backend NAME] [COMMAND] [OPTIONS]

  --backend NAME     the Burn backend every command runs on: flex (the default), ndarray, and
                     wgpu or cuda when built with `--features wgpu` / `--features cuda`; the
                     VLGO_BACKEND variable sets it too (the flag wins). Recorded as `backend`
                     in summary.json

commands:
  swiss-roll   the swiss-roll experiment (the default): FISTA against variational operators
  pretrain     contrastive pre-training of a ResNet-18 on images, then its evaluation
  probe        linear probe of a pre-trained run's frozen features (updates its summary.json)
  knn          kNN evaluation of a pre-trained run (updates its summary.json)
  identity     ManifoldCLR runs: probe accuracy on clean and prior-moved test features
  coefficients ManifoldCLR runs: per-class mean |c| of prior samples (a heat map)
  neighbours   ManifoldCLR runs: prior samples shown as their nearest training images
  paths        ManifoldCLR runs: paths expm(t Psi_m) z of the largest generators
  compare      a markdown table of finished runs by method (mean and spread over seeds)
  sweep        pre-training runs over a grid of settings and seeds, their table and plots
  semisup      semi-supervised classification with few labels on a run's frozen features
  demo         a tour of the core API: operators, transport, gradients

swiss-roll options:
  --full             the paper's 1000 epochs (default: a reduced run of 200)
  --out DIR          run folder (default: runs/swiss-roll[-full]-seed<N>, never overwritten)
  --seed N           seed of data, initialisation and noise (default 0)
  --epochs N         override the number of epochs
  --points N         points on the roll (default 5000)
  --k1 N, --k2 N     partners from the k1-th..k2-th nearest neighbours (default 20..60)
  --methods A,B,..   methods to run: fista, laplace_j<J>, thresholded_j<J>
  --set KEY=VALUE    any other setting of the resolved config.toml (repeatable), e.g.
                     --set encoder_lr=3e-3 --set prior.scale=0.05
  --grid KEY=V1,V2   one run per value (repeatable: every combination), into --out DIR
                     (default: runs/swiss-roll[-full]-seed<N>-grid-<names>); linked settings
                     move together: --grid beta:prior.scale=5e-3:0.01,5e-4:1e-3. Each method
                     is trained once per setting that matters to it; an interrupted grid
                     resumes; writes study.md: the paper's four conclusions per regime

pretrain options:
  --config FILE      the run's settings, e.g. configs/fashion-mnist-simclr-mlp-cpu.toml
  --data-dir DIR     the data set's folder (Fashion-MNIST: the Debian package's by default)
  --out DIR          run folder (default: runs/<config name>-seed<N>, never overwritten)
  --resume           continue the run folder's checkpoint with its own settings (--out names
                     it; its config.toml, changed by --set, each change named; a --config
                     holding other settings is refused)
  --set KEY=VALUE    any setting of the config (repeatable), e.g. --set pretrain.epochs=2

probe / knn / identity / coefficients / neighbours / paths options:
  --run DIR          the run folder of a pre-training run; the settings are those of
                     its config.toml ([probe], knn_k, baselines, [diagnostics]), which
                     may be edited; results are written into the run folder

compare options:
  --runs DIR...      run folders (all that follow), e.g. runs/fashion-mnist-*

sweep options:
  --config FILE      the settings every run starts from
  --grid KEY=V1,V2   a swept setting and its values (repeatable: the grid of all
                     combinations), e.g. --grid pretrain.model.manifold.lambda=1,10,100
  --seeds S1,S2,...  seeds of every grid point (default: the config's seed)
  --set KEY=VALUE    any other setting (repeatable)
  --data-dir DIR     the data set's folder
  --out DIR          the sweep's folder (default: runs/<config name>-sweep-<keys>);
                     run again, a sweep skips finished runs and resumes stopped ones;
                     it ends with sweep.md and plots/<metric>_vs_<key>.png

semisup options:
  --run DIR          a pre-training run folder; results go to DIR/semisup/ (an interrupted
                     run resumes from its results.jsonl)
  --labels K1,K2,..  labels per class, one experiment each (default 5)
  --splits N         random label splits per experiment (default 50, the paper's)
  --methods A,B,..   ce-only, pseudo-label, mm-ict, featmatch, vlgo (default: all; vlgo
                     only on a run with a learned prior)
  --iterations N     iterations per split (default 5000; FeatMatch twice as many)
  --set KEY=VALUE    any semisup.* setting of the run's config (repeatable), e.g.
                     --set semisup.confidence=0.7
  --bench            time the trainer on synthetic 128-d features instead: one split and
                     max(4, semisup.splits_at_once) splits at once, iterations/s per
                     split (--iterations, default 200)

  -h, --help         this text";

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Print usage.
    Help,
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

fn value<'a>(flag: &str, it: &mut impl Iterator<Item = &'a String>) -> Result<&'a String> {
    it.next()
        .ok_or_else(|| CliError::invalid(flag, "nothing", "expected a value after it"))
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T> {
    text.parse().map_err(|_| {
        CliError::invalid(flag, format!("{text:?}"), "expected a non-negative integer")
    })
}

/// Parses the arguments after the program name. The settings are validated here, so a bad
/// value is reported before any work starts.
pub fn parse(args: &[String]) -> Result<Command> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Command::Help);
    }
    let (command, rest) = match args.first().map(String::as_str) {
        None => ("swiss-roll", &args[..0]),
        Some(flag) if flag.starts_with("--") => ("swiss-roll", args),
        Some(cmd) => (cmd, &args[1..]),
    };
    match command {
        "demo" if rest.is_empty() => Ok(Command::Demo),
        "demo" => Err(CliError::invalid(
            "demo arguments",
            rest.join(" "),
            "the demo takes none",
        )),
        "swiss-roll" => parse_swiss_roll(rest),
        "pretrain" => parse_pretrain(rest),
        "sweep" => parse_sweep(rest),
        "semisup" => parse_semisup(rest),
        "probe" | "knn" => Ok(Command::Evaluate {
            run: run_folder(command, rest)?,
            probe: command == "probe",
        }),
        "compare" => match rest.split_first() {
            Some((flag, runs)) if flag == "--runs" && !runs.is_empty() => Ok(Command::Compare {
                runs: runs.iter().map(PathBuf::from).collect(),
            }),
            _ => Err(CliError::invalid(
                "compare arguments",
                format!("{:?}", rest.join(" ")),
                "expected --runs DIR [DIR ...]",
            )),
        },
        other => match Diagnostic::parse(other) {
            Some(what) => Ok(Command::Diagnose {
                run: run_folder(command, rest)?,
                what,
            }),
            None => Err(CliError::invalid(
                "command",
                format!("{other:?}"),
                "expected swiss-roll, pretrain, probe, knn, identity, coefficients, \
                 neighbours, paths, compare, sweep, semisup or demo (see `vlgo --help`)",
            )),
        },
    }
}

/// `--run DIR`, the only arguments of the commands on a run folder.
fn run_folder(command: &str, rest: &[String]) -> Result<PathBuf> {
    match rest {
        [flag, run] if flag == "--run" => Ok(PathBuf::from(run)),
        _ => Err(CliError::invalid(
            format!("{command} arguments"),
            format!("{:?}", rest.join(" ")),
            "expected --run DIR",
        )),
    }
}

fn parse_swiss_roll(args: &[String]) -> Result<Command> {
    let full = args.iter().any(|a| a == "--full");
    let mut config = if full {
        SwissRollConfig::full()
    } else {
        SwissRollConfig::reduced()
    };
    let mut out = None;
    let mut axes = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--full" => {}
            "--grid" => axes.push(crate::sweep::Axis::parse(value(flag, &mut it)?)?),
            "--out" => out = Some(PathBuf::from(value(flag, &mut it)?)),
            "--seed" => config.seed = number(flag, value(flag, &mut it)?)?,
            "--epochs" => config.epochs = number(flag, value(flag, &mut it)?)?,
            "--points" => config.points = number(flag, value(flag, &mut it)?)?,
            "--k1" => config.k1 = number(flag, value(flag, &mut it)?)?,
            "--k2" => config.k2 = number(flag, value(flag, &mut it)?)?,
            "--methods" => {
                config.methods = value(flag, &mut it)?
                    .split(',')
                    .map(|m| m.trim().to_string())
                    .collect()
            }
            "--set" => config = set(&config, value(flag, &mut it)?)?,
            other => {
                return Err(CliError::invalid(
                    "swiss-roll option",
                    format!("{other:?}"),
                    "see `vlgo --help`",
                ));
            }
        }
    }
    config.validate()?;
    if !axes.is_empty() {
        let out = out.unwrap_or_else(|| Study::default_out(full, config.seed, &axes));
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
        out,
        full,
    })
}

fn parse_pretrain(args: &[String]) -> Result<Command> {
    let mut config_path = None;
    let (mut data_dir, mut out, mut resume, mut sets) = (None, None, false, Vec::new());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--config" => config_path = Some(PathBuf::from(value(flag, &mut it)?)),
            "--data-dir" => data_dir = Some(PathBuf::from(value(flag, &mut it)?)),
            "--out" => out = Some(PathBuf::from(value(flag, &mut it)?)),
            "--resume" => resume = true,
            "--set" => sets.push(value(flag, &mut it)?.clone()),
            other => {
                return Err(CliError::invalid(
                    "pretrain option",
                    format!("{other:?}"),
                    "see `vlgo --help`",
                ));
            }
        }
    }
    if resume {
        let out = out.ok_or_else(|| {
            CliError::invalid(
                "--resume",
                "no --out",
                "--out naming the run folder to continue",
            )
        })?;
        let config = resumed_config(&out, config_path, &sets, data_dir)?;
        config.validate()?;
        return Ok(Command::Pretrain {
            config: Box::new(config),
            out,
            resume,
        });
    }
    let (path, config) = image_config(config_path, "a config file to train with", &sets, data_dir)?;
    config.validate()?;
    let out = match out {
        Some(out) => out,
        None => {
            let stem = path
                .file_stem()
                .map_or("run".into(), |s| s.to_string_lossy());
            PathBuf::from("runs").join(format!("{stem}-seed{}", config.pretrain.seed))
        }
    };
    Ok(Command::Pretrain {
        config: Box::new(config),
        out,
        resume,
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
    let mut config = stored;
    for s in sets {
        config = set(&config, s)?;
    }
    if data_dir.is_some() {
        config.data_dir = data_dir;
    }
    Ok(config)
}

fn parse_sweep(args: &[String]) -> Result<Command> {
    let (mut config_path, mut data_dir, mut out) = (None, None, None);
    let (mut axes, mut seeds, mut sets) = (Vec::new(), None, Vec::new());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--config" => config_path = Some(PathBuf::from(value(flag, &mut it)?)),
            "--data-dir" => data_dir = Some(PathBuf::from(value(flag, &mut it)?)),
            "--out" => out = Some(PathBuf::from(value(flag, &mut it)?)),
            "--grid" => axes.push(crate::sweep::Axis::parse(value(flag, &mut it)?)?),
            "--seeds" => {
                seeds = Some(
                    value(flag, &mut it)?
                        .split(',')
                        .map(|s| number::<u64>(flag, s.trim()))
                        .collect::<Result<Vec<_>>>()?,
                )
            }
            "--set" => sets.push(value(flag, &mut it)?.clone()),
            other => {
                return Err(CliError::invalid(
                    "sweep option",
                    format!("{other:?}"),
                    "see `vlgo --help`",
                ));
            }
        }
    }
    let (path, base) = image_config(config_path, "a config file to sweep", &sets, data_dir)?;
    let sweep = crate::sweep::Sweep {
        seeds: seeds.unwrap_or_else(|| vec![base.pretrain.seed]),
        out: out.unwrap_or_else(|| crate::sweep::Sweep::default_out(&path, &axes)),
        base,
        axes,
    };
    // Every run's settings are checked here, before any run starts.
    sweep.points()?;
    Ok(Command::Sweep(Box::new(sweep)))
}

fn list<T>(flag: &str, text: &str, item: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let items: Vec<T> = text
        .split(',')
        .map(|s| item(s.trim()))
        .collect::<Result<_>>()?;
    match items.is_empty() {
        true => Err(CliError::invalid(flag, "nothing", "a comma-separated list")),
        false => Ok(items),
    }
}

fn parse_semisup(args: &[String]) -> Result<Command> {
    let (mut run, mut bench) = (None, false);
    let (mut labels, mut splits, mut methods, mut sets) = (vec![5], 50, None, Vec::new());
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--run" => run = Some(PathBuf::from(value(flag, &mut it)?)),
            "--bench" => bench = true,
            "--labels" => labels = list(flag, value(flag, &mut it)?, |s| number(flag, s))?,
            "--splits" => splits = number(flag, value(flag, &mut it)?)?,
            "--methods" => {
                let names = value(flag, &mut it)?;
                let parsed = list(flag, names, |s| Ok(s.parse::<SemisupMethod>()?))?;
                if parsed
                    .iter()
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    != parsed.len()
                {
                    return Err(CliError::invalid(flag, names, "each method once"));
                }
                methods = Some(parsed);
            }
            "--iterations" => {
                let n: usize = number(flag, value(flag, &mut it)?)?;
                sets.push(format!("semisup.iterations={n}"));
            }
            "--set" => sets.push(value(flag, &mut it)?.clone()),
            other => {
                return Err(CliError::invalid(
                    "semisup option",
                    format!("{other:?}"),
                    "see `vlgo --help`",
                ));
            }
        }
    }
    let run = match (run, bench) {
        (Some(run), _) => run,
        (None, true) => PathBuf::new(),
        (None, false) => return Err(CliError::invalid("--run", "nothing", "a run folder")),
    };
    if splits == 0 || labels.contains(&0) {
        return Err(CliError::invalid(
            "--splits / --labels",
            format!("{splits} splits of {labels:?} labels per class"),
            "at least one split and one label per class",
        ));
    }
    let mut dedup = labels.clone();
    dedup.sort_unstable();
    dedup.dedup();
    if dedup.len() != labels.len() {
        return Err(CliError::invalid(
            "--labels",
            format!("{labels:?}"),
            "each count once",
        ));
    }
    Ok(Command::Semisup(Box::new(crate::semisup::SemisupArgs {
        run,
        labels,
        splits,
        methods,
        sets,
        bench,
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
    let mut config = ImageRunConfig::load(&path)?;
    for s in sets {
        config = set(&config, s)?;
    }
    if data_dir.is_some() {
        config.data_dir = data_dir;
    }
    Ok((path, config))
}
