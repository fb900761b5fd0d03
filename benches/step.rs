//! Images per second of a SimCLR training step (ResNet-18 with the CIFAR stem, MLP head, cosine
//! InfoNCE, AdamW; two views per image) on the CPU backends, split into where the time goes:
//! data (the two augmented views of the batch), forward (backbone, head and loss), backward,
//! optimiser. The setting of `pytorch_anchors.py --only step`, whose figures belong beside
//! these (same machine, same sitting).
//!
//! `cargo bench --bench step [-- --backend flex|ndarray --batch N --width W --max-pool --reps R --only 32|28
//! --methods simclr-mlp,manifoldclr-mlp --network-width F --config FILES --layer-times
//! --caller-thread]`.
//! Defaults: both backends, the anchors' batches (128 at 3 x 32 x 32, width 64; 256 at
//! 1 x 28 x 28, width 32), one timed step after one warm-up. Throughput per image barely
//! depends on the batch here (the convolutions cost per image), so `--batch` can shorten a
//! slow backend's run; the printed figures say which batch was used. `--methods` times several
//! methods one after the other in the same process (the ManifoldCLR overhead: operators of
//! 16 generators in 64 x 64 blocks, encoder and prior at width `--network-width`, default 512;
//! one AdamW over every parameter). Like the `vlgo` program, it keeps freed buffers in the heap
//! (`vlgo_core::cpu::host::keep_freed_buffers`); `--default-allocator` leaves glibc's defaults,
//! to time what that setting is worth. Like the `vlgo` program, it makes its main thread the
//! first thread of rayon's pool (`vlgo_core::threads::pool_on_this_thread`); `--caller-thread`
//! leaves the main thread outside the pool, to time what that is worth. `--layer-times`
//! prints, after each method's row, the timed steps' wall time in each layer kernel per shape
//! (`vlgo_core::layers::timing`), the per-operator view of `torch.profiler`. `--config
//! configs/a.toml,configs/b.toml` times the model of each run config instead (its method,
//! network, ManifoldCLR settings, view side and batch; `--batch` still overrides the batch): the
//! step that `vlgo pretrain` trains with that config, less what the config logs between steps
//! (the features' spectrum) and with one AdamW over every parameter where the run has a group
//! per part.

use std::path::Path;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::prelude::*;

use manifoldclr::{ContrastiveConfig, ManifoldConfig, Method, TrainBackend};
use vlgo::pretrain::ImageRunConfig;
use vlgo_core::layers::timing;
use vlgo_datasets::fixtures::synthetic;
use vlgo_datasets::{Augment, AugmentConfig, Normalization};

fn arg(name: &str) -> Option<String> {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter()
        .position(|a| a == name)
        .and_then(|k| argv.get(k + 1).cloned())
}

/// One timed setting: the model, the views' side and the batch.
struct Setting {
    model: ContrastiveConfig,
    side: usize,
    batch: usize,
    /// Where the model's settings come from (a config file), printed before the setting.
    source: Option<String>,
}

impl Setting {
    /// The benchmark's own setting of `method` (the anchors' networks, ManifoldCLR's settings
    /// at their defaults).
    fn synthetic(method: Method, channels: usize, side: usize, width: usize, batch: usize) -> Self {
        let model = ContrastiveConfig {
            width,
            in_channels: channels,
            max_pool: std::env::args().any(|a| a == "--max-pool"),
            manifold: ManifoldConfig {
                network_width: arg("--network-width").map_or(512, |f| {
                    f.parse().expect("--network-width takes an integer")
                }),
                ..ManifoldConfig::default()
            },
            ..ContrastiveConfig::new(method)
        };
        Self {
            model,
            side,
            batch,
            source: None,
        }
    }

    /// The model, view side and batch of a run config (`configs/*.toml`); `--batch` overrides
    /// the config's batch.
    fn from_config(path: &str) -> Self {
        let run = ImageRunConfig::load(Path::new(path))
            .and_then(|run| run.validate().map(|()| run))
            .unwrap_or_else(|e| panic!("--config {path}: {e}"));
        let batch = arg("--batch").map_or(run.pretrain.batch_size, |b| {
            b.parse().expect("--batch takes an integer")
        });
        Self {
            model: run.pretrain.model,
            side: run.image_size,
            batch,
            source: Some(path.to_string()),
        }
    }
}

fn bench<B: TrainBackend>(label: &str, setting: &Setting, reps: usize) {
    let device = B::Device::default();
    B::seed(&device, 0);
    let config = &setting.model;
    let (method, width, channels) = (config.method, config.width, config.in_channels);
    let (side, batch) = (setting.side, setting.batch);
    let mut model = config.init::<B>(&device).unwrap();
    let mut optim = AdamWConfig::new().with_epsilon(1e-8).init();
    let set = synthetic(channels, side, side, 10, batch, 1);
    let norm = Normalization {
        mean: vec![0.5; channels],
        std: vec![0.25; channels],
    };
    let augment = Augment::new(AugmentConfig::simclr(side), norm, channels, side, side).unwrap();
    let indices: Vec<usize> = (0..batch).collect();
    let mut totals = [0.0f64; 4];
    let layer_times = std::env::args().any(|a| a == "--layer-times");
    for rep in 0..=reps {
        if layer_times && rep == 1 {
            timing::start();
        }
        let t = Instant::now();
        let [a, b] = augment.two_views(&set, &indices, 0, rep as u64).unwrap();
        let dims = [batch, channels, side, side];
        let a = Tensor::<B, 4>::from_data(TensorData::new(a, dims), &device);
        let b = Tensor::<B, 4>::from_data(TensorData::new(b, dims), &device);
        let data = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let loss = model.step(a, b, rep as u64).unwrap().loss;
        let _ = loss.clone().into_scalar();
        let forward = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let backward = t.elapsed().as_secs_f64();
        let t = Instant::now();
        model = optim.step(1e-3, model, grads);
        // The optimiser's update is lazy on some backends: read a parameter back.
        let _ = model.head.clone().into_record();
        let optimiser = t.elapsed().as_secs_f64();
        if rep > 0 {
            for (s, v) in totals.iter_mut().zip([data, forward, backward, optimiser]) {
                *s += v / reps as f64;
            }
        }
    }
    let step: f64 = totals.iter().sum();
    println!(
        "| {label} | {method} | {}width {width}, {channels}x{side}x{side}, batch {batch} | {:.1} | {:.2} | {:.2} / {:.2} / {:.2} / {:.2} |",
        setting
            .source
            .as_ref()
            .map_or(String::new(), |s| format!("{s}: ")),
        batch as f64 / step,
        step,
        totals[0],
        totals[1],
        totals[2],
        totals[3]
    );
    if layer_times {
        print_layer_times(&timing::finish(), reps, step);
    }
}

/// The layer kernels' time per step, largest first, and the rest of the step (Burn's own
/// operations, the loss, autodiff's bookkeeping, the data).
fn print_layer_times(times: &[timing::LayerTime], reps: usize, step: f64) {
    println!();
    println!("| layer | shape | calls per step | ms per step | share of the step |");
    println!("|---|---|---|---|---|");
    let per_step = |seconds: f64| seconds / reps as f64;
    for t in times {
        println!(
            "| {} | {} | {} | {:.2} | {:.1} % |",
            t.layer,
            t.shape,
            t.calls as f64 / reps as f64,
            per_step(t.seconds) * 1e3,
            100.0 * per_step(t.seconds) / step
        );
    }
    let layers: f64 = times.iter().map(|t| per_step(t.seconds)).sum();
    println!(
        "| all layer kernels | | | {:.2} | {:.1} % |",
        layers * 1e3,
        100.0 * layers / step
    );
    println!(
        "| the rest of the step | | | {:.2} | {:.1} % |",
        (step - layers) * 1e3,
        100.0 * (step - layers) / step
    );
    println!();
}

fn main() {
    if !std::env::args().any(|a| a == "--default-allocator") {
        vlgo_core::cpu::host::keep_freed_buffers();
    }
    if !std::env::args().any(|a| a == "--caller-thread") {
        vlgo_core::threads::pool_on_this_thread();
    }
    let reps: usize = arg("--reps").map_or(1, |r| r.parse().expect("--reps takes an integer"));
    let backend = arg("--backend");
    let only = arg("--only");
    println!(
        "| backend | method | setting | images/s | s/step | data / forward / backward / optimiser, s |"
    );
    println!("|---|---|---|---|---|---|");
    let mut settings = Vec::new();
    if let Some(paths) = arg("--config") {
        settings.extend(paths.split(',').map(Setting::from_config));
    } else {
        let methods: Vec<Method> = arg("--methods")
            .unwrap_or_else(|| "simclr-mlp".into())
            .split(',')
            .map(|m| m.parse().expect("--methods takes method names"))
            .collect();
        for (channels, side, default_width, default_batch) in [(3, 32, 64, 128), (1, 28, 32, 256)] {
            if only.as_deref().is_some_and(|o| o != side.to_string()) {
                continue;
            }
            let batch = arg("--batch").map_or(default_batch, |b| {
                b.parse().expect("--batch takes an integer")
            });
            let width = arg("--width").map_or(default_width, |w| {
                w.parse().expect("--width takes an integer")
            });
            for &method in &methods {
                settings.push(Setting::synthetic(method, channels, side, width, batch));
            }
        }
    }
    for setting in &settings {
        if backend.as_deref().is_none_or(|b| b == "flex") {
            bench::<Autodiff<burn::backend::Flex>>("flex", setting, reps);
        }
        if backend.as_deref().is_none_or(|b| b == "ndarray") {
            bench::<Autodiff<burn::backend::NdArray>>("ndarray", setting, reps);
        }
    }
}
