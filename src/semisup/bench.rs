//! `vlgo semisup --bench`: the trainer's speed on synthetic features of the CPU network's size
//! (d = 128, 10 classes), one split alone and the batched splits, in iterations per second per
//! split. `scripts/semisup_bench_pytorch.py` times the same loop in PyTorch for the ratio.

use std::time::Instant;

use manifoldclr::semisup::{SemisupConfig, SemisupMethod, SemisupSet, train_splits};
use manifoldclr::{Features, TrainBackend};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use vlgo_core::StreamRng;

use crate::error::Result;

/// Gaussian features around one random centre per class.
fn synthetic(rows: usize, dim: usize, classes: usize, seed: u64) -> Result<Features> {
    let mut rng = StreamRng::seed_from_u64(seed);
    let centres: Vec<f32> = (0..classes * dim)
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    let labels: Vec<u16> = (0..rows).map(|i| (i % classes) as u16).collect();
    let values = labels
        .iter()
        .flat_map(|&l| {
            let c = &centres[usize::from(l) * dim..(usize::from(l) + 1) * dim];
            c.iter()
                .map(|&m| {
                    let e: f32 = StandardNormal.sample(&mut rng);
                    m + e
                })
                .collect::<Vec<_>>()
        })
        .collect();
    Ok(Features::new(values, dim, labels)?)
}

/// Times `config.iterations` of the pseudo-label method (two forward passes, one backward) for
/// one split and for `max(4, config.splits_at_once)` splits; returns the report.
pub fn bench<B: TrainBackend>(config: &SemisupConfig, device: &B::Device) -> Result<String> {
    let (dim, classes) = (128, 10);
    let train = synthetic(60_000, dim, classes, 0)?;
    let test = synthetic(1_000, dim, classes, 1)?;
    let set = SemisupSet::new(&train, &test, classes)?;
    let time = |splits: usize, iterations: usize| -> Result<f64> {
        let ids: Vec<u64> = (0..splits as u64).collect();
        let config = SemisupConfig {
            iterations,
            ..config.clone()
        };
        let start = Instant::now();
        train_splits::<B>(
            SemisupMethod::PseudoLabel,
            &config,
            &set,
            5,
            &ids,
            None,
            device,
            &mut |_| {},
        )?;
        Ok(start.elapsed().as_secs_f64())
    };
    // Warm-up: allocations and thread pools.
    time(1, 5)?;
    let iterations = config.iterations;
    let mut report = format!(
        "semisup trainer, pseudo-label, d = {dim}, hidden = {}, C = {classes}, B_l = {}, B_u = {}, \
         {iterations} iterations\n",
        config.hidden, config.labelled_batch, config.unlabelled_batch
    );
    let one = time(1, iterations)?;
    // The batched form is timed even when the setting says 1: that is its measurement.
    let s = config.splits_at_once.max(4);
    let many = time(s, iterations)?;
    let rate = |splits: usize, secs: f64| (splits * iterations) as f64 / secs;
    report += &format!(
        "one split:        {:>8.1} iterations/s ({one:.2} s)\n{s:>2} splits at once: {:>8.1} \
         iterations/s per split ({many:.2} s)\n",
        rate(1, one),
        rate(s, many)
    );
    Ok(report)
}
