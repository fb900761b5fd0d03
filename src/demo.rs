//! The core demo: operators, transport through the exponential, Laplace coefficients and
//! gradients through the exponential's own backward (`vlgo demo`).

use std::time::Instant;

use burn::prelude::*;
use burn::tensor::Distribution;
use burn::tensor::backend::AutodiffBackend;
use vlgo_core::{
    ExpmBackend, ExpmvConfig, FixedPrior, LaplaceParams, LieOperatorsConfig, NoiseStreams,
    OperatorForm, Threshold, ThresholdVariant, TransportMethod, distance_improvement, sample,
    try_manifold_loss,
};

/// Runs the demo on `B`'s default device.
pub fn demo<B: AutodiffBackend + ExpmBackend>() -> vlgo_core::Result<()> {
    let device: B::Device = Default::default();
    let (m, d, b, n) = (8, 64, 16, 512);
    println!(
        "vlgo demo on {}: M = {m} generators, d = {d}, blocks of {b}, batch {n}",
        B::name(&device)
    );

    // Operators with the stable initialisation; features z0 and partners z1 = T(c*) z0 for
    // sparse Laplace coefficients c* from the fixed prior.
    let ops = LieOperatorsConfig::new(m, d)
        .with_form(OperatorForm::BlockDiagonal(b))
        .with_init_beta(1.0)
        .with_seed(1)
        .init::<B>(&device)?;
    let streams = NoiseStreams::new(42);
    let prior = FixedPrior {
        shift: 0.0,
        scale: 0.5,
    };
    let fixed = LaplaceParams::<B>::fixed(&prior, [n, m], &device)?;
    let u = Tensor::<B, 1>::from_floats(streams.uniform_centered(0, 0, n * m).as_slice(), &device)
        .reshape([n, m]);
    let threshold = Threshold::new(0.3, ThresholdVariant::Noise)?;
    let c_true = sample(&fixed, u, &threshold).detach();
    let zeros = c_true
        .clone()
        .equal_elem(0.0)
        .int()
        .sum()
        .into_scalar()
        .to_f64();
    println!(
        "true coefficients: {:.0}% exactly zero (thresholded Laplace)",
        100.0 * zeros / (n * m) as f64
    );
    let z0 = Tensor::<B, 2>::random([n, d], Distribution::Normal(0.0, 1.0), &device);
    let z1 = ops.try_transport(c_true, z0.clone())?.detach();

    // Transport two ways: exp(A) z without forming exp(A), and through T = expm(A).
    let c = Tensor::<B, 2>::random([n, m], Distribution::Normal(0.0, 0.3), &device);
    for method in [TransportMethod::Expmv, TransportMethod::Expm] {
        let start = Instant::now();
        let moved = ops.transport_with(c.clone(), z0.clone(), method, &ExpmvConfig::default())?;
        let norm = moved.square().sum().sqrt().into_scalar().to_f64();
        println!(
            "transport {method:?}: ||T(c) z0|| = {norm:.4} in {:.1} ms",
            start.elapsed().as_secs_f64() * 1e3
        );
    }

    // Infer the coefficients by gradient descent on the manifold loss, from c = 0.
    let mut c = Tensor::<B, 2>::zeros([n, m], &device);
    let start = Instant::now();
    for step in 0..=60 {
        let cg = c.clone().require_grad();
        let moved = ops.try_transport(cg.clone(), z0.clone())?;
        let loss = try_manifold_loss(moved.clone(), z1.clone())?;
        if step % 20 == 0 {
            let di = distance_improvement(z0.clone(), z1.clone(), moved);
            println!(
                "step {step:>3}: manifold loss {:.3e}, distance improvement {di:.3}",
                loss.clone().into_scalar().to_f64()
            );
        }
        let grads = loss.backward();
        let g = cg.grad(&grads).expect("coefficients receive a gradient");
        c = c - Tensor::from_inner(g) * 20.0;
    }
    println!(
        "60 gradient steps through the exponential's own backward in {:.2} s",
        start.elapsed().as_secs_f64()
    );
    let norms = ops
        .generator_norms()
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap_or_default();
    println!(
        "generator F-norms: {}",
        norms
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(())
}
