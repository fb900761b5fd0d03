//! The `vlgo` program as a user meets it: help, a short swiss-roll run end to end, and clear
//! errors with a non-zero exit for bad arguments (never a panic).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn vlgo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vlgo"))
        .args(args)
        .output()
        .expect("the vlgo binary runs")
}

fn rejected(args: &[&str], needles: &[&str]) {
    let out = vlgo(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn help_prints_usage() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_vlgo"))
            .args(args)
            // Help needs no backend: a bad one in the environment does not hide it.
            .env("VLGO_BACKEND", "bogus")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let text = help(&["--help"]);
    assert!(
        text.contains("Usage: vlgo") && text.contains("swiss-roll") && text.contains("semisup"),
        "{text}"
    );
    // Each command has its own help, with its own options.
    let text = help(&["pretrain", "--help"]);
    assert!(
        text.contains("--resume") && !text.contains("--labels"),
        "{text}"
    );
    let text = help(&["--backend", "ndarray", "semisup", "--help"]);
    assert!(
        text.contains("--labels") && text.contains("--bench"),
        "{text}"
    );
    let text = help(&["help", "sweep"]);
    assert!(
        text.contains("--grid") && text.contains("--seeds"),
        "{text}"
    );
}

#[test]
fn bad_arguments_are_clear_errors() {
    rejected(
        &["frobnicate"],
        &["unrecognized subcommand", "'frobnicate'"],
    );
    rejected(
        &["swiss-roll", "--methods", "fista,sgd_j3"],
        &["method", "sgd_j3", "laplace_j<J>"],
    );
    rejected(
        &["swiss-roll", "--k1", "40", "--k2", "30"],
        &["k1..k2", "40..30"],
    );
    rejected(
        &["swiss-roll", "--points", "50"],
        &["points", "50", "k2 = 60"],
    );
    rejected(
        &["swiss-roll", "--seed", "minus-one"],
        &["--seed", "minus-one"],
    );
    rejected(&["swiss-roll", "--set", "zeta=-1"], &["zeta", "-1"]);
    rejected(
        &["swiss-roll", "--out"],
        &["--out <DIR>", "a value is required"],
    );
    rejected(
        &["paths", "runs/x"],
        &["unexpected argument 'runs/x'", "--run <DIR>"],
    );
    rejected(
        &["compare", "--runs"],
        &["--runs <DIR>", "a value is required"],
    );
    rejected(&["--epochs", "x"], &["--epochs <N>", "'x'"]);
    rejected(
        &["--backend", "nonsense"],
        &["backend", "nonsense", "ndarray"],
    );
    rejected(
        &["swiss-roll", "--backend"],
        &["--backend <NAME>", "a value is required"],
    );
    if !cfg!(feature = "wgpu") {
        rejected(&["--backend", "wgpu"], &["backend", "--features wgpu"]);
    }
}

#[test]
fn the_backend_is_chosen_at_run_time_and_recorded() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().to_path_buf();
    let run = |dir: &str, flag: Option<&str>, env: Option<&str>| -> Value {
        let out = root.join(dir);
        let mut command = Command::new(env!("CARGO_BIN_EXE_vlgo"));
        if let Some(name) = flag {
            command.args(["--backend", name]);
        }
        match env {
            Some(name) => command.env("VLGO_BACKEND", name),
            None => command.env_remove("VLGO_BACKEND"),
        };
        let output = command
            .args(["swiss-roll", "--points", "200", "--k1", "5", "--k2", "15"])
            .args(["--epochs", "1", "--methods", "laplace_j1", "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        summary_figures(&out)
    };
    let default = if cfg!(feature = "flex") {
        "flex"
    } else {
        "ndarray"
    };
    let backend = |v: &Value| v["backend"].as_str().unwrap().to_string();
    assert!(backend(&run("default", None, None)).contains(default));
    assert!(backend(&run("env", None, Some("ndarray"))).contains("ndarray"));
    // The flag wins over the variable.
    let flagged = run("flag", Some("ndarray"), Some("nonsense"));
    assert!(backend(&flagged).contains("ndarray"));
    assert_eq!(flagged["device"], "Cpu");
}

fn summary_figures(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json written");
    let mut summary: Value = serde_json::from_str(&text).expect("summary.json parses");
    for method in summary["methods"].as_object_mut().unwrap().values_mut() {
        let m = method.as_object_mut().unwrap();
        // Timings differ between runs; everything else must not.
        m.remove("train_seconds");
        m.remove("speedup_vs_fista");
    }
    summary
}

fn short_run(out: &Path, seed: &str) -> Output {
    vlgo(&[
        "swiss-roll",
        "--points",
        "400",
        "--k1",
        "5",
        "--k2",
        "15",
        "--epochs",
        "6",
        "--seed",
        seed,
        "--methods",
        "fista,laplace_j1,thresholded_j3",
        "--set",
        "batch_size=100",
        "--set",
        "fista_max_iterations=30",
        "--set",
        "encoder_lr=3e-3",
        "--out",
        out.to_str().unwrap(),
    ])
}

#[test]
fn a_short_swiss_roll_run_writes_its_folder_and_learns() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().to_path_buf();
    let (first, second) = (root.join("a"), root.join("b"));
    let out = short_run(&first, "3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in ["config.toml", "metrics.jsonl", "summary.json"]
        .iter()
        .chain(&[
            "plots/mse.png",
            "plots/runtime.png",
            "plots/l1.png",
            "plots/paths.png",
        ])
    {
        let len = std::fs::metadata(first.join(file))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 0, "{file} missing or empty");
    }
    let summary = summary_figures(&first);
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(first.join("summary.json")).unwrap())
            .unwrap();
    for name in ["fista", "laplace_j1", "thresholded_j3"] {
        let m = &raw["methods"][name];
        for key in ["final_mse", "final_l1", "train_seconds", "speedup_vs_fista"] {
            let v = m[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v >= 0.0, "{name}.{key} = {v}");
        }
        // The count follows from the reported norms (those above 5 % of the largest), and a
        // method that learned keeps at least one operator.
        let norms: Vec<f64> = m["operator_norms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_f64().unwrap())
            .collect();
        assert_eq!(norms.len(), 6, "{name}: one norm per operator");
        assert!(
            norms.iter().all(|n| n.is_finite() && *n >= 0.0),
            "{norms:?}"
        );
        let largest = norms.iter().cloned().fold(0.0, f64::max);
        let counted = norms.iter().filter(|&&n| n > 0.05 * largest).count();
        assert!(counted >= 1, "{name}: {norms:?}");
        assert_eq!(
            m["nonzero_operators"].as_u64(),
            Some(counted as u64),
            "{name}"
        );
    }
    assert!(
        raw["methods"]["fista"]["mean_fista_iterations"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    assert!(
        raw["methods"]["laplace_j1"]
            .get("mean_fista_iterations")
            .is_none()
    );

    // The error falls over training, for every method.
    let lines: Vec<Value> = std::fs::read_to_string(first.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3 * 6);
    for name in ["fista", "laplace_j1", "thresholded_j3"] {
        let mse: Vec<f64> = lines
            .iter()
            .filter(|l| l["method"] == name)
            .map(|l| l["mse"].as_f64().unwrap())
            .collect();
        assert!(mse[5] < mse[0], "{name}: {mse:?}");
    }

    // Same seed, same figures; a run never overwrites another.
    let out = short_run(&second, "3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(summary, summary_figures(&second));
    rejected(
        &[
            "swiss-roll",
            "--epochs",
            "1",
            "--out",
            first.to_str().unwrap(),
        ],
        &["--out", "never overwrites"],
    );
}

#[test]
fn swiss_roll_regime_settings_reach_the_run_and_its_diagnostics() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().to_path_buf();
    let out = vlgo(&[
        "swiss-roll",
        "--points",
        "400",
        "--k1",
        "5",
        "--k2",
        "15",
        "--epochs",
        "4",
        "--methods",
        "fista,thresholded_j3",
        "--set",
        "batch_size=100",
        "--set",
        "fista_max_iterations=30",
        "--set",
        "data_scale=unit",
        "--set",
        "threshold_variant=sample",
        "--set",
        "standardise_encoder_input=true",
        "--set",
        "lr_schedule=cosine",
        "--set",
        "gap_every=2",
        "--out",
        root.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read_to_string(root.join("config.toml")).unwrap();
    for line in [
        "data_scale = \"unit\"",
        "threshold_variant = \"sample\"",
        "standardise_encoder_input = true",
        "lr_schedule = \"cosine\"",
        "gap_every = 2",
    ] {
        assert!(
            config.contains(line),
            "{line} not in config.toml:\n{config}"
        );
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("summary.json")).unwrap()).unwrap();
    // The roll's pooled deviation is several units: the data were divided by it.
    let scale = summary["data_scale"].as_f64().unwrap();
    assert!((3.0..20.0).contains(&scale), "data_scale {scale}");
    let lines: Vec<Value> = std::fs::read_to_string(root.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for l in lines.iter().filter(|l| l["method"] == "thresholded_j3") {
        let scales = l["posterior_scale"].as_array().expect("posterior_scale");
        assert_eq!(scales.len(), 6);
        assert!(scales.iter().all(|s| s.as_f64().unwrap() > 0.0));
        let at_location = l["mse_at_location"].as_f64().unwrap();
        assert!(at_location.is_finite() && at_location >= 0.0);
        let epoch = l["epoch"].as_u64().unwrap();
        match epoch % 2 {
            0 => {
                let gap = &l["gap"];
                let fista = gap["fista_mse"].as_f64().unwrap();
                let location = gap["location_mse"].as_f64().unwrap();
                let objective = gap["objective_gap"].as_f64().unwrap();
                assert!(fista.is_finite() && location.is_finite() && objective.is_finite());
                assert!(gap["fista_iterations"].as_u64().unwrap() >= 1);
            }
            _ => assert!(l.get("gap").is_none(), "epoch {epoch} has no gap"),
        }
    }
    assert!(
        lines
            .iter()
            .filter(|l| l["method"] == "fista")
            .all(|l| l.get("gap").is_none())
    );
    rejected(
        &["swiss-roll", "--set", "data_scale=wide"],
        &["data_scale", "wide"],
    );
}

fn grid_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "swiss-roll",
        "--points",
        "300",
        "--k1",
        "5",
        "--k2",
        "15",
        "--epochs",
        "2",
        "--methods",
        "fista,laplace_j2,thresholded_j2",
        "--set",
        "batch_size=100",
        "--set",
        "fista_max_iterations=20",
        "--grid",
        "beta:prior.scale=5e-3:0.01,0:0.02",
        "--grid",
        "threshold_variant=noise,sample",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn swiss_roll_grid_trains_each_method_once_resumes_and_writes_its_study() {
    let temp = tempfile::tempdir().unwrap();
    // A folder the grid must create itself (and must not, when refused).
    let root = temp.path().join("study");
    let out_arg = root.to_str().unwrap();
    // Bad axes are named before anything is written.
    rejected(
        &grid_args(out_arg, &["--grid", "nonsense=1,2"]),
        &["nonsense"],
    );
    rejected(
        &grid_args(out_arg, &["--grid", "zeta:encoder_lr=0.1"]),
        &["one part per linked key"],
    );
    rejected(
        &grid_args(out_arg, &["--grid", "zeta=0.1,-1"]),
        &["zeta", "-1"],
    );
    assert!(!root.exists(), "nothing written for a refused grid");

    let out = vlgo(&grid_args(out_arg, &[]));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folder = |b: &str, t: &str| root.join(format!("beta:scale={b},threshold_variant={t}"));
    let trained = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = summary_figures_of(dir)["methods"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    };
    // FISTA ignores the KL, the prior and the threshold; plain Laplace ignores the threshold.
    assert_eq!(
        trained(&folder("5e-3:0.01", "noise")),
        ["fista", "laplace_j2", "thresholded_j2"]
    );
    assert_eq!(trained(&folder("5e-3:0.01", "sample")), ["thresholded_j2"]);
    assert_eq!(
        trained(&folder("0:0.02", "noise")),
        ["laplace_j2", "thresholded_j2"]
    );
    assert_eq!(trained(&folder("0:0.02", "sample")), ["thresholded_j2"]);
    let config = std::fs::read_to_string(folder("0:0.02", "noise").join("config.toml")).unwrap();
    assert!(
        config.contains("beta = 0.0") && config.contains("scale = 0.02"),
        "{config}"
    );
    let study = std::fs::read_to_string(root.join("study.md")).unwrap();
    assert!(stdout.contains(&study), "{stdout}");
    // One row per regime in the conclusions table, each with a verdict on the four.
    let rows: Vec<&str> = study
        .lines()
        .filter(|l| l.starts_with("| 5e-3:0.01 |") || l.starts_with("| 0:0.02 |"))
        .collect();
    assert_eq!(rows.len(), 4 + 4 + 4 * 3, "{study}");
    assert!(
        rows[..4]
            .iter()
            .all(|r| r.matches("no:").count() + r.matches("**yes**:").count() == 4)
    );
    // Every regime reports the same FISTA: its cell of the MSE table is one value.
    let fista_cells: Vec<&str> = rows[4..8]
        .iter()
        .map(|r| r.split(" | ").nth(3).unwrap())
        .collect();
    assert!(
        fista_cells.iter().all(|c| *c == fista_cells[0]),
        "{fista_cells:?}"
    );

    // An interrupted regime is trained again, the others skipped; the figures repeat.
    let kept = std::fs::read(folder("5e-3:0.01", "noise").join("summary.json")).unwrap();
    let before = summary_figures_of(&folder("0:0.02", "sample"));
    std::fs::remove_file(folder("0:0.02", "sample").join("summary.json")).unwrap();
    let again = vlgo(&grid_args(out_arg, &[]));
    assert!(again.status.success());
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(stdout.matches("finished, skipped").count(), 3, "{stdout}");
    assert_eq!(
        std::fs::read(folder("5e-3:0.01", "noise").join("summary.json")).unwrap(),
        kept
    );
    let after = summary_figures_of(&folder("0:0.02", "sample"));
    let mse = |v: &Value| {
        v["methods"]["thresholded_j2"]["final_mse"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(mse(&before), mse(&after));

    // Other settings into the same folder are refused, with nothing changed.
    rejected(
        &grid_args(out_arg, &["--set", "encoder_lr=1e-3"]),
        &["holds another run"],
    );
    assert_eq!(
        std::fs::read(folder("5e-3:0.01", "noise").join("summary.json")).unwrap(),
        kept
    );
}

const TINY_CONFIG: &str = r#"
dataset = "fashion-mnist"
image_size = 12
knn_every = 1
knn_k = 5
monitor_limit = 0
eval_batch = 16
baselines = true

[pretrain]
epochs = 2
batch_size = 8
warmup_epochs = 1
seed = 3

[pretrain.model]
method = "simclr-mlp"
width = 2
in_channels = 1
max_pool = false
head_hidden = 16
head_output = 8
temperature = 0.5
direct_dims = 8

[pretrain.backbone]
lr = 3e-3
weight_decay = 1e-5
min_lr = 1e-5

[pretrain.head]
lr = 3e-3
weight_decay = 1e-5
min_lr = 1e-5

[probe]
epochs = 3
lr = 1e-2
final_lr = 1e-5
batch_size = 16
weight_decay = 5e-6
seed = 0
"#;

/// A fixture data set in Fashion-MNIST's files and a config for it.
fn fixture(dir: &Path) -> (String, String) {
    let data = dir.join("data");
    let train = vlgo_datasets::fixtures::synthetic(1, 12, 12, 10, 24, 1);
    let test = vlgo_datasets::fixtures::synthetic(1, 12, 12, 10, 10, 2);
    vlgo_datasets::fixtures::write_idx_dataset(&data, &train, &test).unwrap();
    let config = dir.join("tiny.toml");
    std::fs::write(&config, TINY_CONFIG).unwrap();
    (config.display().to_string(), data.display().to_string())
}

/// A run started on the default CPU backend continues and is evaluated on wgpu (software Vulkan
/// where there is no GPU): checkpoints do not depend on the backend that wrote them, and the
/// first step after the resume gives the CPU's losses to 1e-3 relative, for SimCLR-MLP and
/// ManifoldCLR-MLP.
#[cfg(feature = "wgpu")]
#[test]
fn a_checkpoint_written_on_the_cpu_resumes_and_evaluates_on_wgpu() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (config, data) = fixture(&dir);
    let ok = |out: Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let read = |run: &str, file: &str| std::fs::read_to_string(dir.join(run).join(file)).unwrap();
    let steps = |run: &str| -> Vec<Value> {
        read(run, "metrics.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let manifold = [
        "pretrain.model.method=manifoldclr-mlp",
        "pretrain.model.manifold.num_operators=3",
        "pretrain.model.manifold.block_size=8",
        "pretrain.model.manifold.network_width=4",
        "pretrain.model.manifold.prior_warmup=4",
    ];
    for (method, sets) in [("simclr-mlp", &[][..]), ("manifoldclr-mlp", &manifold[..])] {
        let pretrain = |backend: &str, run: &str, epochs: &str, resume: bool| {
            let out = dir.join(run).display().to_string();
            let mut args = vec!["--backend", backend, "pretrain", "--out", &out];
            args.extend(["--set", epochs]);
            if resume {
                // The run's own settings, but for the longer schedule.
                args.push("--resume");
            } else {
                args.extend(["--config", &config, "--data-dir", &data]);
                args.extend(["--set", "knn_every=0", "--set", "baselines=false"]);
                for s in sets {
                    args.extend(["--set", s]);
                }
            }
            ok(vlgo(&args));
        };
        let (cpu, across) = (format!("{method}-cpu"), format!("{method}-across"));
        pretrain("flex", &cpu, "pretrain.epochs=2", false);
        pretrain("flex", &across, "pretrain.epochs=1", false);
        pretrain("wgpu", &across, "pretrain.epochs=2", true);
        let summary: Value = serde_json::from_str(&read(&across, "summary.json")).unwrap();
        assert!(
            summary["backend"].as_str().unwrap().contains("wgpu"),
            "{summary}"
        );
        assert_eq!(summary["epochs"], 2);
        let top1 = summary["linear_probe"]["top1"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&top1), "{top1}");
        let (a, b) = (steps(&cpu), steps(&across));
        assert_eq!(a.len(), b.len(), "{method}: steps logged");
        // The steps after the resume see the checkpoint's weights and the same keyed views:
        // their losses and gradient norms are the CPU's, up to rounding that grows by the
        // step (measured: within 2.3e-5 relative over the epoch).
        let first = a
            .iter()
            .position(|x| x["epoch"] == 2)
            .expect("a second epoch");
        let keys = [
            "loss_nce",
            "loss_manifold",
            "kl",
            "grad_norm",
            "operators_grad_norm",
            "variational_grad_norm",
        ];
        for (i, (p, q)) in a.iter().zip(&b).enumerate().skip(first) {
            let tolerance = if i == first { 1e-4 } else { 1e-3 };
            for key in keys {
                let (Some(x), Some(y)) = (p[key].as_f64(), q[key].as_f64()) else {
                    continue;
                };
                assert!(
                    (x - y).abs() <= tolerance * x.abs().max(1e-6),
                    "{method}, step {}: {key} {x} on the CPU, {y} on wgpu after the resume",
                    i + 1
                );
            }
        }
    }
    let run = dir.join("simclr-mlp-across").display().to_string();
    ok(vlgo(&["--backend", "wgpu", "knn", "--run", &run]));
    let summary: Value = serde_json::from_str(&read("simclr-mlp-across", "summary.json")).unwrap();
    assert!(summary["knn"]["top1"].as_f64().is_some());
}

/// `--devices 2`: each batch of 8 shared by two threads of the CPU backend; the first device logs
/// its time in the exchanges, and the checkpoint resumes on one device.
#[test]
fn pretrain_shares_each_batch_among_devices_and_resumes_on_one() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (config, data) = fixture(&dir);
    let out = dir.join("two").display().to_string();
    let mut args = vec![
        "pretrain",
        "--config",
        &config,
        "--data-dir",
        &data,
        "--out",
        &out,
    ];
    args.extend(["--set", "knn_every=0", "--set", "baselines=false"]);
    args.extend(["--set", "pretrain.epochs=1", "--devices", "2"]);
    let first = vlgo(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let metrics = || -> Vec<Value> {
        std::fs::read_to_string(dir.join("two/metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let steps = metrics();
    // 24 images in batches of 8.
    assert_eq!(steps.len(), 3);
    for s in &steps {
        let t = s["exchange_seconds"].as_f64().unwrap();
        assert!(t >= 0.0 && t.is_finite(), "{s}");
    }
    let stored = std::fs::read_to_string(dir.join("two/config.toml")).unwrap();
    assert!(stored.contains("devices = 2"), "{stored}");
    let resumed = vlgo(&[
        "pretrain",
        "--out",
        &out,
        "--resume",
        "--set",
        "pretrain.epochs=2",
        "--devices",
        "1",
    ]);
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    assert!(err.contains("pretrain.devices"), "{err}");
    let steps = metrics();
    assert_eq!(steps.len(), 6);
    assert!(
        steps[3..]
            .iter()
            .all(|s| s.get("exchange_seconds").is_none())
    );
    // Three devices do not divide a batch of 8.
    let bad = vlgo(&[
        "pretrain",
        "--config",
        &config,
        "--data-dir",
        &data,
        "--out",
        &dir.join("bad").display().to_string(),
        "--devices",
        "3",
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("devices"), "{err}");
}

#[test]
fn pretrain_then_probe_and_knn_end_to_end_on_a_fixture() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (config, data) = fixture(&dir);
    let run = dir.join("run");
    let run_s = run.display().to_string();
    let out = vlgo(&[
        "pretrain",
        "--config",
        &config,
        "--data-dir",
        &data,
        "--out",
        &run_s,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in [
        "config.toml",
        "metrics.jsonl",
        "summary.json",
        "plots/knn_accuracy.png",
    ] {
        assert!(run.join(file).is_file(), "{file} missing");
    }
    assert!(run.join("checkpoints/state.json").is_file());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    for key in [
        "/train_seconds",
        "/images_per_second",
        "/linear_probe/top1",
        "/linear_probe/top5",
        "/knn/top1",
        "/baselines/raw_pixels/top1",
        "/baselines/random_init/top1",
        "/effective_rank",
        "/feature_entropy",
    ] {
        let v = summary.pointer(key).and_then(Value::as_f64);
        assert!(v.is_some_and(f64::is_finite), "{key}: {v:?}");
    }
    let top1 = summary["linear_probe"]["top1"].as_f64().unwrap();
    assert!((0.0..=100.0).contains(&top1));
    // 24 images in batches of 8 for 2 epochs: 6 step lines, plus 2 kNN lines.
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(lines.lines().filter(|l| l.contains("loss_nce")).count(), 6);
    assert_eq!(lines.lines().filter(|l| l.contains("knn_top1")).count(), 2);

    // The vlgo semi-supervised method needs a learned prior: refused on a SimCLR run.
    rejected(
        &["semisup", "--run", &run_s, "--methods", "ce-only,vlgo"],
        &["vlgo on a simclr-mlp run", "learned prior"],
    );
    assert!(!run.join("semisup").exists(), "nothing written");

    // probe and knn re-evaluate the checkpoint and keep the other keys; probe also re-measures
    // the baselines (spoiled here, so that only a re-measurement brings them back).
    let mut spoiled = summary.clone();
    spoiled["baselines"]["raw_pixels"]["top1"] = serde_json::json!(-1.0);
    spoiled["baselines"]["random_init"]["top1"] = serde_json::json!(-1.0);
    std::fs::write(run.join("summary.json"), spoiled.to_string()).unwrap();
    let out = vlgo(&["probe", "--run", &run_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        again["linear_probe"], summary["linear_probe"],
        "same features, same probe"
    );
    assert_eq!(again["baselines"], summary["baselines"]);
    let out = vlgo(&["knn", "--run", &run_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The run folder is never overwritten.
    let out = vlgo(&[
        "pretrain",
        "--config",
        &config,
        "--data-dir",
        &data,
        "--out",
        &run_s,
    ]);
    assert_eq!(out.status.code(), Some(2));
    // compare: the run as a one-seed row of the table.
    let out = vlgo(&["compare", "--runs", &run_s]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("| `simclr-mlp`"))
        .expect("a row");
    assert!(row.contains(&format!("{:.2} ± 0.00", top1)), "{row}");
    // A run without operators has nothing for the ManifoldCLR diagnostics.
    rejected(
        &["identity", "--run", &run_s],
        &["simclr-mlp", "a method with operators"],
    );

    // Resume continues with the run's own settings: a --config holding others is refused and
    // names them, touching nothing; --set changes one and the change is named.
    let metrics = |run: &Path| std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let before = metrics(&run);
    rejected(
        &[
            "pretrain",
            "--config",
            &config,
            "--set",
            "pretrain.epochs=3",
            "--set",
            "knn_every=0",
            "--out",
            &run_s,
            "--resume",
        ],
        &[
            "--config on --resume",
            "knn_every: 1 -> 0",
            "pretrain.epochs: 2 -> 3",
        ],
    );
    assert_eq!(metrics(&run), before, "nothing written");
    let out = vlgo(&[
        "pretrain",
        "--out",
        &run_s,
        "--resume",
        "--set",
        "pretrain.epochs=3",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("settings changed from its config.toml: pretrain.epochs: 2 -> 3"),
        "{err}"
    );
    // One more epoch of 3 steps with the run's kNN monitor (every epoch), nothing else.
    let lines = metrics(&run);
    assert_eq!(lines.lines().filter(|l| l.contains("loss_nce")).count(), 9);
    assert_eq!(lines.lines().filter(|l| l.contains("knn_top1")).count(), 3);
    assert!(lines.starts_with(&before));
    let stored: toml::Table =
        toml::from_str(&std::fs::read_to_string(run.join("config.toml")).unwrap()).unwrap();
    assert_eq!(stored["pretrain"]["epochs"].as_integer(), Some(3));
}

#[test]
fn manifoldclr_pretrains_end_to_end_and_logs_its_terms() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (config, data) = fixture(&dir);
    let run = dir.join("run");
    let run_s = run.display().to_string();
    let out = vlgo(&[
        "pretrain",
        "--config",
        &config,
        "--data-dir",
        &data,
        "--out",
        &run_s,
        "--set",
        "pretrain.model.method=manifoldclr-mlp",
        "--set",
        "pretrain.model.manifold.num_operators=3",
        "--set",
        "pretrain.model.manifold.block_size=8",
        "--set",
        "pretrain.model.manifold.network_width=4",
        "--set",
        "pretrain.model.manifold.prior_warmup=4",
        "--set",
        "pretrain.spectrum_every=1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let steps: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v.get("loss_nce").is_some())
        .collect();
    assert_eq!(steps.len(), 6);
    for step in &steps {
        for key in [
            "loss_manifold",
            "kl",
            "distance_improvement",
            "nonzero_per_sample",
            "mean_abs_coefficient",
            "operators_grad_norm",
            "variational_grad_norm",
            "generators_used",
            "feature_norm",
            "effective_rank",
            "feature_entropy",
            "stable_rank",
        ] {
            let v = step.get(key).and_then(Value::as_f64);
            assert!(v.is_some_and(f64::is_finite), "{key}: {v:?}");
        }
        for key in [
            "generator_norms",
            "encoder_scale_range",
            "encoder_loc_range",
            "prior_scale_range",
            "prior_loc_range",
        ] {
            assert!(step[key].as_array().is_some_and(|a| !a.is_empty()), "{key}");
        }
        let rank = step["effective_rank"].as_f64().unwrap();
        assert!(rank >= 1.0 && step["stable_rank"].as_f64().unwrap() <= rank + 1e-9);
    }
    for file in ["optim-operators", "optim-variational"] {
        let found = std::fs::read_dir(run.join("checkpoints"))
            .unwrap()
            .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(file));
        assert!(found, "{file} missing from the checkpoint");
    }
    let resolved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(resolved.contains("method = \"manifoldclr-mlp\""));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert!(summary.pointer("/linear_probe/top1").is_some());

    // Each diagnostic runs on the run folder and writes its files there.
    for (command, files) in [
        ("identity", &["identity.json"][..]),
        (
            "coefficients",
            &["coefficients.json", "plots/coefficients.png"],
        ),
        ("neighbours", &["neighbours.json", "plots/neighbours.png"]),
        ("paths", &["paths.json", "plots/paths.png"]),
    ] {
        let out = vlgo(&[command, "--run", &run_s]);
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for file in files {
            let len = std::fs::metadata(run.join(file)).map(|m| m.len()).ok();
            assert!(len.is_some_and(|l| l > 100), "{command}: {file} {len:?}");
        }
    }
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(run.join(name)).unwrap()).unwrap()
    };
    let identity = read("identity.json");
    for key in ["clean", "learned_prior", "fixed_prior", "random_same_norm"] {
        let top1 = identity[key]["top1"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&top1), "{key}: {top1}");
    }
    // The random perturbation moves each feature exactly as far as the learned prior does.
    let (learned, random) = (
        identity["learned_prior"]["mean_displacement"]
            .as_f64()
            .unwrap(),
        identity["random_same_norm"]["mean_displacement"]
            .as_f64()
            .unwrap(),
    );
    assert!(
        learned > 0.0 && (learned - random).abs() <= 1e-3 * learned,
        "{learned} {random}"
    );
    assert_eq!(read("summary.json")["identity"], identity);
    // The same probe scores the clean features in `identity` as in `probe` (same seed).
    assert_eq!(identity["clean"], summary["linear_probe"]);
    let coefficients = read("coefficients.json");
    assert_eq!(coefficients["mean_abs"].as_array().unwrap().len(), 10);
    assert_eq!(coefficients["mean_abs"][0].as_array().unwrap().len(), 3);
    let neighbours = read("neighbours.json");
    let images = neighbours["images"].as_array().unwrap();
    assert_eq!(images.len(), 6);
    assert_eq!(images[0]["samples"].as_array().unwrap().len(), 6);
    let paths = read("paths.json");
    let generators = paths["generators"].as_array().unwrap();
    assert_eq!(generators.len(), 3, "M = 3 generators, at most 4 drawn");
    let norms: Vec<f64> = generators
        .iter()
        .map(|g| g["norm"].as_f64().unwrap())
        .collect();
    assert!(
        norms.windows(2).all(|w| w[0] >= w[1]),
        "largest first: {norms:?}"
    );
    semisup_on_the_run(&run);
}

/// `vlgo semisup` on a trained ManifoldCLR fixture run: every method, the outputs, resuming
/// without redoing a split, and bad input refused with nothing overwritten.
fn semisup_on_the_run(run: &Path) {
    let run_s = run.display().to_string();
    let semisup = |extra: &[&str]| {
        let mut args = vec![
            "semisup",
            "--run",
            &run_s,
            "--labels",
            "1,2",
            "--iterations",
            "20",
            "--set",
            "semisup.unlabelled_batch=4",
            "--set",
            "semisup.hidden=32",
            "--set",
            "semisup.splits_at_once=2",
        ];
        args.extend_from_slice(extra);
        vlgo(&args)
    };
    let out = semisup(&["--splits", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = run.join("semisup");
    let lines = |dir: &Path| -> Vec<Value> {
        std::fs::read_to_string(dir.join("results.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let first = lines(&dir);
    assert_eq!(
        first.len(),
        2 * 3 * 5,
        "2 label counts x 3 splits x 5 methods"
    );
    for l in &first {
        let acc = l["accuracy"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&acc), "{l}");
        let want = if l["method"] == "featmatch" { 40 } else { 20 };
        assert_eq!(l["iterations"], want, "{l}");
        let has_fraction =
            ["pseudo-label", "featmatch", "vlgo"].contains(&l["method"].as_str().unwrap());
        assert_eq!(l.get("confident_fraction").is_some(), has_fraction, "{l}");
    }
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let ce = &summary["labels_1"]["ce-only"];
    assert_eq!(ce["splits"], 3);
    assert!(ce.get("improvement_mean").is_none());
    let pl = &summary["labels_2"]["pseudo-label"];
    assert!(pl["improvement_mean"].is_number() || pl["improvement_mean"].is_null());
    let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
    for needle in [
        "| vlgo |",
        "| mm-ict |",
        "1 labels: accuracy",
        "2 labels: accuracy",
    ] {
        assert!(table.contains(needle), "{table}");
    }
    for k in [1, 2] {
        let len = std::fs::metadata(dir.join(format!("plots/per_trial_{k}.png")))
            .unwrap()
            .len();
        assert!(len > 1000);
    }
    let run_summary = summary_figures_of(run);
    assert_eq!(run_summary["semisup"], summary);
    let cache_time = std::fs::metadata(dir.join("features.bin"))
        .unwrap()
        .modified()
        .unwrap();

    // A fourth split: only its 10 results are new, and the features are not embedded again.
    let out = semisup(&["--splits", "4", "--methods", "ce-only,vlgo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = lines(&dir);
    assert_eq!(second.len(), 30 + 2 * 2);
    assert_eq!(second[..30], first[..]);
    assert!(second[30..].iter().all(|l| l["split"] == 3));
    let cache_after = std::fs::metadata(dir.join("features.bin"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(cache_time, cache_after);
    // The summary still covers every method and labels count in the folder.
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["labels_1"]["vlgo"]["splits"], 4);
    assert_eq!(summary["labels_2"]["mm-ict"]["splits"], 3);

    // Bad input: named errors before any work, results untouched.
    let before = std::fs::read(dir.join("results.jsonl")).unwrap();
    let same = [
        "--iterations",
        "20",
        "--set",
        "semisup.unlabelled_batch=4",
        "--set",
        "semisup.hidden=32",
    ];
    let mut too_many = vec!["semisup", "--run", &run_s, "--labels", "3"];
    too_many.extend_from_slice(&same);
    rejected(&too_many, &["labels per class", "the 2 training rows"]);
    rejected(
        &["semisup", "--run", &run_s, "--methods", "fixmatch"],
        &["ce-only, pseudo-label"],
    );
    rejected(
        &[
            "semisup",
            "--run",
            &run_s,
            "--labels",
            "1",
            "--iterations",
            "21",
        ],
        &["semisup settings", "move that folder away"],
    );
    let empty = run.with_file_name("no-checkpoint");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::copy(run.join("config.toml"), empty.join("config.toml")).unwrap();
    rejected(
        &["semisup", "--run", &empty.display().to_string()],
        &["checkpoint"],
    );
    assert_eq!(std::fs::read(dir.join("results.jsonl")).unwrap(), before);
}

#[test]
fn compare_tables_mean_and_spread_by_method() {
    use vlgo::compare::{RunFigures, table};
    let run = |method: &str, probe: f64, di: Option<f64>| RunFigures {
        method: method.to_string(),
        train_seconds: probe + 20.0,
        probe,
        knn: probe - 1.0,
        effective_rank: 40.0,
        min_step_rank: Some(30.0 + probe / 100.0),
        max_late_di: di,
        di_below_one_from: di.map(|_| 7),
    };
    let text = table(&[
        run("b", 80.0, Some(0.5)),
        run("a", 70.0, None),
        run("b", 82.0, Some(0.7)),
        run("b", 84.0, Some(0.6)),
        run("c", 60.0, Some(0.9)),
        RunFigures {
            di_below_one_from: None,
            ..run("c", 60.0, Some(1.2))
        },
    ]);
    let rows: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(rows.len(), 3);
    // First appearance orders the rows; sample standard deviation of 80, 82, 84 is 2.
    assert_eq!(
        rows[0],
        "| `b` | 3 | 104 | 82.00 ± 2.00 | 81.00 ± 2.00 | 40.0 | 30.8 | 0.700 | 7 |"
    );
    assert_eq!(
        rows[1],
        "| `a` | 1 | 90 | 70.00 ± 0.00 | 69.00 ± 0.00 | 40.0 | 30.7 | - | - |"
    );
    // A seed whose DI never settles below 1 is named, not hidden behind the others' step.
    assert!(
        rows[2].ends_with("| 1.200 | not for 1 of 2 seeds |"),
        "{}",
        rows[2]
    );
}

#[test]
fn diagnostic_helpers_compute_what_they_say() {
    use vlgo::diagnostics::{
        coefficients::class_means, neighbours::nearest, paths::principal_plane,
    };
    // A circle in the plane of e1 and e3 of R^4: the plane holds all of it.
    let moves: Vec<f64> = (0..16)
        .flat_map(|i| {
            let a = i as f64 * std::f64::consts::PI / 8.0;
            [a.cos() - 1.0, 0.0, a.sin(), 0.0]
        })
        .collect();
    let (points, share) = principal_plane(&moves, 4).unwrap();
    assert!((share - 1.0).abs() < 1e-9, "{share}");
    for (p, m) in points.iter().zip(moves.chunks(4)) {
        let (r2, want) = (p.0 * p.0 + p.1 * p.1, m[0] * m[0] + m[2] * m[2]);
        assert!((r2 - want).abs() < 1e-9, "lengths are kept: {r2} vs {want}");
    }
    // Class 0 rows (1, 0) and (3, 0); class 1 row (0, -2).
    // Class 2 has no rows.
    let means = class_means(&[1.0, 0.0, 3.0, 0.0, 0.0, -2.0], 2, &[0, 0, 1], 3).unwrap();
    let zero = vec![0.0, 0.0];
    assert_eq!(
        means.mean_abs,
        vec![vec![2.0, 0.0], vec![0.0, 2.0], zero.clone()]
    );
    assert_eq!(
        means.nonzero_share,
        vec![vec![1.0, 0.0], vec![0.0, 1.0], zero]
    );
    assert_eq!(means.counts, vec![2, 1, 0]);
    assert!(
        class_means(&[1.0, 2.0], 2, &[5], 3).is_err(),
        "a label out of range"
    );
    assert!(principal_plane(&[f64::INFINITY, 0.0], 2).is_err());
    let bank =
        manifoldclr::Features::new(vec![0.0, 0.0, 5.0, 5.0, 1.0, 1.0], 2, vec![0, 1, 2]).unwrap();
    let (index, d2) = nearest(&bank, &[1.2, 0.9]).unwrap();
    assert_eq!(index, 2);
    assert!((d2 - 0.05).abs() < 1e-6, "{d2}");
    assert_eq!(nearest(&bank, &[4.0, 6.0]).unwrap().0, 1);
    assert_eq!(nearest(&bank, &[f32::NAN, 0.0]), None);

    // Paths: row f * len(ts) + i is expm(t_i Psi_g) z_f - z_f; zero at t = 0.
    use burn::backend::NdArray;
    use burn::prelude::*;
    let device = Default::default();
    let vlgo = vlgo_nn::VlgoConfig::new(vlgo_core::LieOperatorsConfig::new(2, 4))
        .with_width(4)
        .init::<NdArray>(&device)
        .unwrap();
    let z =
        Tensor::<NdArray, 2>::from_floats([[1.0, 2.0, 0.5, -1.0], [0.0, 1.0, 3.0, 2.0]], &device);
    let ts = [-0.5, 0.0, 0.7];
    let moves = vlgo::diagnostics::paths::generator_moves(&vlgo, z.clone(), 1, &ts).unwrap();
    assert_eq!(moves.len(), 2 * 3 * 4);
    for (r, row) in moves.chunks(4).enumerate() {
        let (f, t) = (r / 3, ts[r % 3]);
        let c = Tensor::<NdArray, 2>::from_floats([[0.0, t as f32]], &device);
        let zf = z.clone().narrow(0, f, 1);
        let want = (vlgo.transport(c, zf.clone()) - zf)
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        for (a, b) in row.iter().zip(&want) {
            assert!(
                (a - f64::from(*b)).abs() < 1e-5,
                "row {r}: {row:?} vs {want:?}"
            );
        }
        if t == 0.0 {
            assert!(row.iter().all(|v| *v == 0.0));
        }
    }
}

/// STL-10 pre-trains on its labeled split followed by the unlabeled file: 6 + 10 images in
/// batches of 8 are 2 steps an epoch (the labeled split alone would not fill one), and a
/// `train_limit` of 10 keeps 6 + 4 (1 step); the probe trains on the 6 labeled images.
#[test]
fn stl10_pretrains_on_labeled_and_unlabeled_images() {
    use vlgo_datasets::fixtures::{synthetic, write_stl10};
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let data = dir.join("stl10_binary");
    let unlabeled = synthetic(3, 96, 96, 10, 10, 7).pixels;
    write_stl10(
        &data,
        &synthetic(3, 96, 96, 10, 6, 5),
        &synthetic(3, 96, 96, 10, 4, 6),
        &unlabeled,
        &[],
    )
    .unwrap();
    let config = dir.join("stl10.toml");
    let text = TINY_CONFIG
        .replace("dataset = \"fashion-mnist\"", "dataset = \"stl10\"")
        .replace("image_size = 12", "image_size = 16")
        .replace("in_channels = 1", "in_channels = 3")
        .replace("epochs = 2\n", "epochs = 1\n")
        .replace("baselines = true", "baselines = false");
    std::fs::write(&config, text).unwrap();
    let steps = |run: &Path, extra: &[&str]| {
        let (config, data, run_s) = (
            config.display().to_string(),
            data.display().to_string(),
            run.display().to_string(),
        );
        let mut args = vec![
            "pretrain",
            "--config",
            &config,
            "--data-dir",
            &data,
            "--out",
            &run_s,
        ];
        args.extend_from_slice(extra);
        let out = vlgo(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
        lines.lines().filter(|l| l.contains("loss_nce")).count()
    };
    assert_eq!(steps(&dir.join("all"), &[]), 2);
    assert_eq!(steps(&dir.join("limited"), &["--set", "train_limit=10"]), 1);
    let text = std::fs::read_to_string(dir.join("all/summary.json")).unwrap();
    let summary: Value = serde_json::from_str(&text).unwrap();
    assert!(summary.pointer("/linear_probe/top1").is_some());
}

#[test]
fn a_truncated_data_file_is_named_by_pretrain() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (config, data) = fixture(&dir);
    let images = Path::new(&data).join("train-images-idx3-ubyte.gz");
    let bytes = std::fs::read(&images).unwrap();
    std::fs::write(&images, &bytes[..bytes.len() / 2]).unwrap();
    let run = dir.join("run").display().to_string();
    let out = vlgo(&[
        "pretrain",
        "--config",
        &config,
        "--data-dir",
        &data,
        "--out",
        &run,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("train-images-idx3-ubyte.gz"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Nothing was started: no run folder.
    assert!(!Path::new(&run).exists());
    rejected(
        &[
            "pretrain",
            "--config",
            &config,
            "--set",
            "pretrain.model.method=\"simclr\"",
        ],
        &["simclr-mlp"],
    );
    rejected(&["pretrain"], &["--config"]);
}

#[test]
fn every_shipped_config_parses_and_validates() {
    let mut seen = 0;
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/configs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let config = vlgo::pretrain::ImageRunConfig::load(&path).unwrap();
            config
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            let method = config.pretrain.model.method.to_string();
            assert!(
                stem.starts_with(&format!("{}-{method}", config.dataset)),
                "{stem}"
            );
            seen += 1;
        }
    }
    // Every method of the paper's table on each GPU data set (and the paper-text variant of
    // cifar10-manifoldclr-mlp), and the five methods of the CPU comparison on Fashion-MNIST.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    for dataset in ["cifar10", "stl10", "tinyimagenet"] {
        for method in manifoldclr::Method::ALL {
            let file = dir.join(format!("{dataset}-{method}.toml"));
            assert!(file.is_file(), "{} missing", file.display());
        }
    }
    for method in [
        "simclr-mlp",
        "manifoldclr-mlp",
        "simclr-none",
        "manifoldclr",
        "manifold-directclr",
    ] {
        let file = dir.join(format!("fashion-mnist-{method}-cpu.toml"));
        assert!(file.is_file(), "{} missing", file.display());
    }
    // The paper's form of the ManifoldCLR-MLP CPU config beside the shipped one.
    assert!(
        dir.join("fashion-mnist-manifoldclr-mlp-cpu-paper.toml")
            .is_file()
    );
    // Table 6's cosine rows of the head-less methods on CIFAR-10.
    for method in [
        "simclr-none",
        "directclr",
        "manifoldclr",
        "manifold-directclr",
    ] {
        let file = dir.join(format!("cifar10-{method}-cosine.toml"));
        let config = vlgo::pretrain::ImageRunConfig::load(&file).unwrap();
        assert_eq!(
            config.pretrain.model.similarity,
            Some(manifoldclr::Similarity::Cosine)
        );
    }
    // The semi-supervised confidence threshold: 0.7 on TinyImageNet, the default 0.95 elsewhere.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let config = vlgo::pretrain::ImageRunConfig::load(&path).unwrap();
            let want = if config.dataset == "tinyimagenet" {
                0.7
            } else {
                0.95
            };
            assert_eq!(config.semisup.confidence, want, "{}", path.display());
        }
    }
    // The paper-text CIFAR-10 config thresholds as the paper's text and Algorithm 1 do.
    let text =
        vlgo::pretrain::ImageRunConfig::load(&dir.join("cifar10-manifoldclr-mlp-paper-text.toml"))
            .unwrap()
            .pretrain
            .model
            .manifold;
    assert_eq!(
        (text.threshold, text.samples, text.threshold_variant),
        (0.01, 20, vlgo_core::ThresholdVariant::Sample)
    );
    // Every file says where its values come from.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.starts_with('#'), "{}: no header", path.display());
        }
    }
    assert_eq!(seen, 3 * 8 + 1 + 7 + 1 + 4);
}

/// The settings of a short image run on the 12 x 12 fixture: width 4 (32-d features), batch 64,
/// 8 epochs of 512 images (64 steps), the spectrum every step, the CPU configs' temperature.
fn collapse_fixture(dir: &Path) -> (vlgo::pretrain::ImageRunConfig, String) {
    let data = dir.join("data");
    let train = vlgo_datasets::fixtures::synthetic(1, 12, 12, 10, 512, 1);
    let test = vlgo_datasets::fixtures::synthetic(1, 12, 12, 10, 200, 2);
    vlgo_datasets::fixtures::write_idx_dataset(&data, &train, &test).unwrap();
    let mut config: vlgo::pretrain::ImageRunConfig = toml::from_str(TINY_CONFIG).unwrap();
    config.knn_every = 0;
    config.baselines = false;
    config.eval_batch = 64;
    config.pretrain.epochs = 8;
    config.pretrain.batch_size = 64;
    config.pretrain.spectrum_every = 1;
    let model = &mut config.pretrain.model;
    (model.width, model.head_hidden, model.head_output) = (4, 64, 32);
    model.temperature = 0.1;
    (config, data.display().to_string())
}

/// Per-step effective ranks and the test features' effective rank of a finished run.
fn ranks(run: &Path) -> (Vec<f64>, f64) {
    let lines = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let steps = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v["effective_rank"].as_f64())
        .collect();
    (
        steps,
        summary_figures_of(run)["effective_rank"].as_f64().unwrap(),
    )
}

fn summary_figures_of(run: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap()
}

/// The collapse of ManifoldCLR-MLP's features (`docs/manifoldclr.md`, "The collapse"): with the
/// shipped CPU config's Lie group settings (sizes scaled to the fixture) the per-step effective
/// rank stays at or above 0.75 of SimCLR-MLP's at every step and so does the test features'; the
/// paper's form (L_m's gradient into the backbone, `backbone_grad = 1`) falls below 0.6 of it on
/// the same data, which shows the check can fail.
#[test]
fn manifoldclr_mlp_features_do_not_collapse_with_the_shipped_settings() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (base, data) = collapse_fixture(&dir);
    let shipped = vlgo::pretrain::ImageRunConfig::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("configs/fashion-mnist-manifoldclr-mlp-cpu.toml"),
    )
    .unwrap()
    .pretrain
    .model
    .manifold;
    let run = |name: &str, method: &str, backbone_grad: Option<f64>| {
        let mut config = base.clone();
        config.pretrain.model.method = method.parse().unwrap();
        let m = &mut config.pretrain.model.manifold;
        *m = manifoldclr::ManifoldConfig {
            num_operators: 4,
            block_size: 16,
            network_width: 32,
            prior_warmup: 10,
            ..shipped.clone()
        };
        if let Some(g) = backbone_grad {
            m.backbone_grad = g;
        }
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
        let out = dir.join(name);
        let o = vlgo(&[
            "pretrain",
            "--config",
            file.to_str().unwrap(),
            "--data-dir",
            &data,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        ranks(&out)
    };
    let (simclr, simclr_test) = run("simclr", "simclr-mlp", None);
    let (healthy, healthy_test) = run("shipped", "manifoldclr-mlp", None);
    let (paper, _) = run("paper", "manifoldclr-mlp", Some(1.0));
    assert_eq!((simclr.len(), healthy.len(), paper.len()), (64, 64, 64));
    let worst = |xs: &[f64]| {
        xs.iter()
            .zip(&simclr)
            .map(|(x, s)| x / s)
            .fold(f64::INFINITY, f64::min)
    };
    let (h, p) = (worst(&healthy), worst(&paper));
    eprintln!(
        "lowest step-rank ratio to SimCLR-MLP: shipped {h:.3}, paper {p:.3}; test ranks {healthy_test:.1} / {simclr_test:.1}; last step ranks {:.1} / {:.1} / {:.1}",
        healthy[63], paper[63], simclr[63]
    );
    assert!(
        h >= 0.75,
        "shipped settings: step rank down to {h:.2} of SimCLR-MLP's"
    );
    assert!(
        healthy_test >= 0.75 * simclr_test,
        "shipped settings: test rank {healthy_test:.1} against {simclr_test:.1}"
    );
    assert!(
        p < 0.6,
        "the paper's form no longer collapses here ({p:.2}): re-tune the fixture"
    );
}

#[test]
fn sweep_runs_a_grid_resumes_and_writes_its_table_and_plots() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (config, data) = fixture(&dir);
    let out = dir.join("sweep");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "sweep",
            "--config",
            &config,
            "--data-dir",
            &data,
            "--grid",
            "pretrain.model.temperature=0.2,0.5",
            "--seeds",
            "0,1",
            "--set",
            "pretrain.epochs=1",
            "--set",
            "knn_every=0",
            "--set",
            "baselines=false",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let out_s = out.display().to_string();
    let run = |extra: &[&str]| {
        let a = args(extra);
        vlgo(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let first = run(&["--out", &out_s]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let names = [
        "temperature=0.2-seed0",
        "temperature=0.2-seed1",
        "temperature=0.5-seed0",
        "temperature=0.5-seed1",
    ];
    for n in names {
        assert!(out.join(n).join("summary.json").is_file(), "{n}");
    }
    let table = std::fs::read_to_string(out.join("sweep.md")).unwrap();
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(rows[0].starts_with("| 0.2 | `simclr-mlp` | 2 |"), "{table}");
    assert!(rows[1].starts_with("| 0.5 | `simclr-mlp` | 2 |"), "{table}");
    for metric in ["probe_top1", "knn_top1", "effective_rank"] {
        let png = out.join(format!("plots/{metric}_vs_temperature.png"));
        assert!(
            std::fs::metadata(&png).unwrap().len() > 1000,
            "{}",
            png.display()
        );
    }
    // A stop: one run lost its evaluation (stopped after its checkpoint), one stopped before
    // its first checkpoint. Run again, the sweep resumes the first, restarts the second and
    // leaves the finished two alone.
    let kept = out.join(names[0]).join("metrics.jsonl");
    let before = std::fs::metadata(&kept).unwrap().modified().unwrap();
    std::fs::remove_file(out.join(names[1]).join("summary.json")).unwrap();
    std::fs::remove_dir_all(out.join(names[2]).join("checkpoints")).unwrap();
    std::fs::remove_file(out.join(names[2]).join("summary.json")).unwrap();
    let again = run(&["--out", &out_s]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{}: finished, skipped",
            out.join(names[0]).display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}: resuming", out.join(names[1]).display())),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}: starting", out.join(names[2]).display())),
        "{err}"
    );
    assert_eq!(
        std::fs::metadata(&kept).unwrap().modified().unwrap(),
        before
    );
    for n in names {
        assert!(out.join(n).join("summary.json").is_file(), "{n}");
    }
    // Other settings into the same folder: refused, nothing touched.
    let other = run(&["--out", &out_s, "--set", "pretrain.epochs=2"]);
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{err}");
    assert!(err.contains("other settings"), "{err}");
    assert!(err.contains("pretrain.epochs: 1 -> 2"), "{err}");
    assert_eq!(
        std::fs::metadata(&kept).unwrap().modified().unwrap(),
        before
    );
    // A bad key or value is a named error before any run starts.
    let fresh = dir.join("never");
    let fresh_s = fresh.display().to_string();
    for (grid, needles) in [
        (
            "pretrain.model.tempo=0.1,0.2",
            &["no setting named", "tempo"][..],
        ),
        ("pretrain.model.temperature=0.1,-1", &["temperature"][..]),
        ("pretrain.model.temperature", &["--grid", "KEY=V1,V2"][..]),
        ("pretrain.seed=1,2", &["--grid", "--seeds"][..]),
    ] {
        let mut a = args(&["--out", &fresh_s]);
        a[6] = grid.to_string();
        let o = vlgo(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && !err.contains("panicked"),
            "{grid}: {err}"
        );
        for needle in needles {
            assert!(err.contains(needle), "{grid}: {err}");
        }
        assert!(!fresh.exists(), "{grid}: a run started");
    }
}

#[test]
fn t_tests_match_scipy() {
    let text = include_str!("data/ttest-fixtures.json");
    let fixtures: Value = serde_json::from_str(text).unwrap();
    for case in fixtures["cases"].as_array().unwrap() {
        let read = |k: &str| -> Vec<f64> {
            case[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        let w = vlgo::stats::welch(&read("a"), &read("b")).unwrap();
        let close = |x: f64, k: &str| {
            let want = case[k].as_f64().unwrap();
            assert!(
                (x - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{k}: {x} vs {want}"
            );
        };
        close(w.t, "welch_t");
        close(w.df, "welch_df");
        close(w.p_two_sided, "welch_p_two_sided");
        let p = vlgo::stats::paired_greater(&read("a"), &read("b")).unwrap();
        close(p.t, "paired_greater_t");
        close(p.df, "paired_df");
        // p-values down to 1e-6 and below: the relative error is the test.
        let want = case["paired_greater_p"].as_f64().unwrap();
        assert!(
            (p.p_greater - want).abs() <= 1e-6 * want,
            "paired p: {} vs {want}",
            p.p_greater
        );
    }
    assert!(vlgo::stats::paired_greater(&[1.0, 2.0], &[1.0]).is_none());
    assert!(
        vlgo::stats::paired_greater(&[1.0, 2.0], &[0.0, 1.0]).is_none(),
        "no spread"
    );
    // Unequal sizes (3 against 5), by hand: variances 1 and 10, so se^2 = 1/3 + 2,
    // t = -4 / sqrt(7/3), df = (7/3)^2 / ((1/3)^2 / 2 + 2^2 / 4) = 49/9 / (19/18) = 98/19.
    let w = vlgo::stats::welch(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
    assert!((w.t + 4.0 / (7.0f64 / 3.0).sqrt()).abs() < 1e-12, "{w:?}");
    assert!((w.df - 98.0 / 19.0).abs() < 1e-12, "{w:?}");
    assert!(w.p_two_sided > 0.01 && w.p_two_sided < 0.1, "{w:?}");
    assert!(vlgo::stats::welch(&[1.0], &[2.0, 3.0]).is_none());
    assert!(vlgo::stats::welch(&[1.0, 1.0], &[2.0, 2.0]).is_none());
}
