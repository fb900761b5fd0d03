//! `vlgo identity`: does a feature keep its class when the prior moves it? A linear probe trained
//! on clean training features scores clean test features and the same test features moved by a
//! learned-prior sample, by a fixed-prior sample, and by a random perturbation with the norm of
//! the learned-prior move (protocol "Identity preservation").

use manifoldclr::{Accuracy, Features, TrainBackend, linear_probe_each};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use serde_json::{Value, json};
use vlgo_core::StreamRng;

use super::{ManifoldRun, PriorKind, l2};
use crate::error::Result;

/// Noise streams of the two priors' draws.
const LEARNED_STREAM: u64 = 1;
const FIXED_STREAM: u64 = 2;

/// Per row: ||moved - clean|| and ||clean||.
fn displacements(clean: &Features, moved: &Features) -> Vec<(f64, f64)> {
    clean
        .values
        .chunks_exact(clean.dim)
        .zip(moved.values.chunks_exact(clean.dim))
        .map(|(z, m)| {
            let shift = l2(z.iter().zip(m).map(|(a, b)| f64::from(b - a)));
            (shift, l2(z.iter().map(|&a| f64::from(a))))
        })
        .collect()
}

/// `clean` plus, per row, a uniformly random direction on the first `dims` features scaled to
/// that row's `norms` entry: the same distance as the prior's move, in no learned direction.
/// (The published code scales by the squared norm; this uses the norm itself.)
fn random_same_norm(clean: &Features, norms: &[f64], dims: usize, seed: u64) -> Result<Features> {
    let mut rng = StreamRng::seed_from_u64(seed);
    let mut values = clean.values.clone();
    for (row, &r) in values.chunks_exact_mut(clean.dim).zip(norms) {
        let g: Vec<f64> = (0..dims).map(|_| StandardNormal.sample(&mut rng)).collect();
        let len = g
            .iter()
            .map(|x| x * x)
            .sum::<f64>()
            .sqrt()
            .max(f64::MIN_POSITIVE);
        for (v, x) in row.iter_mut().zip(g) {
            *v += (r * x / len) as f32;
        }
    }
    Ok(Features::new(values, clean.dim, clean.labels.clone())?)
}

fn entry(acc: &Accuracy, moves: Option<&[(f64, f64)]>) -> Value {
    let mut v = json!({"top1": acc.top1, "top5": acc.top5});
    if let Some(moves) = moves {
        let n = moves.len().max(1) as f64;
        v["mean_displacement"] = json!(moves.iter().map(|m| m.0).sum::<f64>() / n);
        v["mean_relative_displacement"] =
            json!(moves.iter().map(|m| m.0 / m.1.max(1e-12)).sum::<f64>() / n);
    }
    v
}

/// Writes `identity.json` and the `identity` entry of `summary.json`; returns the entry.
pub fn identity<B: TrainBackend>(run: &ManifoldRun<B>) -> Result<Value> {
    let data = &run.data;
    eprintln!(
        "identity: embedding {} + {} images",
        data.train.len(),
        data.test.len()
    );
    let train = run.embed(&data.train)?;
    let clean = run.embed(&data.test)?;
    let learned = run.moved(&clean, PriorKind::Learned, LEARNED_STREAM)?;
    let fixed = run.moved(&clean, PriorKind::Fixed, FIXED_STREAM)?;
    let learned_moves = displacements(&clean, &learned);
    let norms: Vec<f64> = learned_moves.iter().map(|m| m.0).collect();
    let random = random_same_norm(
        &clean,
        &norms,
        run.operator_dims(),
        run.config.diagnostics.seed,
    )?;
    let (fixed_moves, random_moves) = (
        displacements(&clean, &fixed),
        displacements(&clean, &random),
    );
    eprintln!("identity: linear probe, {} epochs", run.config.probe.epochs);
    let acc = linear_probe_each::<B>(
        &train,
        &[&clean, &learned, &fixed, &random],
        data.train.classes.len(),
        &run.config.probe,
        run.device(),
    )?;
    let result = json!({
        "test_images": clean.len(),
        "probe_epochs": run.config.probe.epochs,
        "clean": entry(&acc[0], None),
        "learned_prior": entry(&acc[1], Some(&learned_moves)),
        "fixed_prior": entry(&acc[2], Some(&fixed_moves)),
        "random_same_norm": entry(&acc[3], Some(&random_moves)),
    });
    run.folder.write_json("identity.json", &result)?;
    run.folder.update_summary("identity", &result)?;
    Ok(result)
}
