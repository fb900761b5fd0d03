//! Views per second of SimCLR's augmentation (two views per image, keyed streams, rayon over
//! the batch), the data side of a pre-training step.
//!
//! `cargo bench --bench augment [-- --batch N --reps R]` prints, for 3 x 32 x 32 (CIFAR-10 size,
//! output 32), 1 x 28 x 28 (Fashion-MNIST, output 28) and 3 x 96 x 96 -> 64 (STL-10) images,
//! the median time of one batch of two views and the views per second, on all cores and on one
//! (the ratio shows how the work spreads).

use std::time::Instant;

use vlgo_datasets::fixtures::synthetic;
use vlgo_datasets::{Augment, AugmentConfig, Normalization};

fn arg(name: &str, default: usize) -> usize {
    let argv: Vec<String> = std::env::args().collect();
    argv.iter()
        .position(|a| a == name)
        .and_then(|k| argv.get(k + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a positive integer"))
        })
        .unwrap_or(default)
}

fn main() {
    let batch = arg("--batch", 512);
    let reps = arg("--reps", 7);
    println!("| images | output | threads | batch of 2 views, ms | views/s |");
    println!("|---|---|---|---|---|");
    for (channels, side, size) in [(3, 32, 32), (1, 28, 28), (3, 96, 64)] {
        let set = synthetic(channels, side, side, 10, batch, 1);
        let norm = Normalization {
            mean: vec![0.5; channels],
            std: vec![0.25; channels],
        };
        let aug = Augment::new(AugmentConfig::simclr(size), norm, channels, side, side).unwrap();
        let indices: Vec<usize> = (0..batch).collect();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for threads in [cores, 1] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut times: Vec<f64> = (0..=reps)
                .map(|epoch| {
                    let start = Instant::now();
                    let views =
                        pool.install(|| aug.two_views(&set, &indices, 0, epoch as u64).unwrap());
                    std::hint::black_box(views);
                    start.elapsed().as_secs_f64()
                })
                .skip(1)
                .collect();
            times.sort_by(f64::total_cmp);
            let median = times[times.len() / 2];
            println!(
                "| {channels}x{side}x{side} | {size} | {threads} | {:.1} | {:.0} |",
                median * 1e3,
                2.0 * batch as f64 / median
            );
        }
    }
}
