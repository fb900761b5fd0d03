//! `vlgo neighbours`: what a prior sample looks like. For a few test images (the first of each
//! class), several learned-prior samples T(c) z are each shown as the training image whose
//! feature is nearest (Euclidean), next to the test image and the nearest neighbour of its clean
//! feature: `plots/neighbours.png` and `neighbours.json`.

use manifoldclr::{Features, TrainBackend};
use serde_json::{Value, json};
use vlgo_datasets::ImageSet;

use super::{ManifoldRun, PriorKind, first_of_each_class, host};
use crate::error::{CliError, Result};
use crate::plot::{Picture, image_grid};

/// Noise stream of the draws.
const STREAM: u64 = 4;

/// Index and squared distance of the row of `bank` nearest to `query` (None for an empty bank
/// or no finite distance).
pub fn nearest(bank: &Features, query: &[f32]) -> Option<(usize, f64)> {
    bank.values
        .chunks_exact(bank.dim)
        .map(|row| {
            row.iter()
                .zip(query)
                .map(|(a, b)| f64::from(a - b).powi(2))
                .sum::<f64>()
        })
        .enumerate()
        .filter(|(_, d)| d.is_finite())
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

fn picture(set: &ImageSet, i: usize) -> Picture<'_> {
    Picture {
        channels: set.channels,
        height: set.height,
        width: set.width,
        pixels: set.image(i),
    }
}

/// Writes `neighbours.json` and `plots/neighbours.png`; returns the JSON.
pub fn neighbours<B: TrainBackend>(run: &ManifoldRun<B>) -> Result<Value> {
    let (train, test) = (&run.data.train, &run.data.test);
    let settings = &run.config.diagnostics;
    eprintln!("neighbours: embedding {} training images", train.len());
    let bank = run.embed(train)?;
    let picked = first_of_each_class(test, settings.neighbour_images);
    let clean = run.embed(&crate::pretrain::data::pick(test, &picked))?;
    let samples = settings.neighbour_samples;
    let (mut rows, mut entries, mut same) = (Vec::new(), Vec::new(), 0usize);
    for (q, &index) in picked.iter().enumerate() {
        let z = run.rows(&clean, q..q + 1);
        let zs = z.clone().repeat_dim(0, samples);
        let c = run.prior_sample(zs.clone(), PriorKind::Learned, index as u64, STREAM)?;
        let moved = host(run.transport(c, zs)?)?;
        let nearest = |v: &[f32]| {
            nearest(&bank, v).ok_or_else(|| {
                CliError::invalid("neighbours", "no finite distance", "finite features")
            })
        };
        let (clean_nn, _) = nearest(&clean.values[q * clean.dim..(q + 1) * clean.dim])?;
        let label = test.labels[index];
        let mut row = vec![picture(test, index), picture(train, clean_nn)];
        let mut found = Vec::new();
        for v in moved.chunks_exact(clean.dim) {
            let (nn, d2) = nearest(v)?;
            same += usize::from(train.labels[nn] == label);
            row.push(picture(train, nn));
            found
                .push(json!({"train_index": nn, "class": train.labels[nn], "distance": d2.sqrt()}));
        }
        rows.push(row);
        entries.push(json!({
            "test_index": index,
            "class": label,
            "nearest_to_clean": {"train_index": clean_nn, "class": train.labels[clean_nn]},
            "samples": found,
        }));
    }
    let mut titles = vec!["test image".to_string(), "nearest: clean".to_string()];
    titles.extend((1..=samples).map(|s| format!("sample {s}")));
    let plot = run.folder.plots_dir()?.join("neighbours.png");
    image_grid(
        &plot,
        "learned-prior samples of test features, shown as the nearest training image",
        &titles,
        &rows,
    )?;
    let total = picked.len() * samples;
    let result = json!({
        "images": entries,
        "same_class_share": (total > 0).then(|| same as f64 / total as f64),
        "plot": "plots/neighbours.png",
    });
    run.folder.write_json("neighbours.json", &result)?;
    Ok(result)
}
