//! vlgo-nn's integration suite (NdArray by default; `cargo test-flex` and friends elsewhere).

use burn::prelude::*;
use vlgo_core::testing::{TestAutodiffBackend as AD, TestBackend as B};
use vlgo_core::{
    FixedPrior, LieOperatorsConfig, NoiseStreams, OperatorInit, Threshold, ThresholdVariant,
};
use vlgo_nn::{CoefficientEncoderConfig, CoefficientPriorConfig, VlgoConfig};

fn max_abs(t: Tensor<B, 2>) -> f32 {
    t.abs().max().into_scalar().to_f32()
}

#[test]
fn encoder_heads_respect_their_clamps_and_the_kl_stays_finite_on_extreme_input() {
    let device = Default::default();
    let prior = FixedPrior {
        shift: 0.05,
        scale: 0.01,
    };
    let encoder = CoefficientEncoderConfig::new(4, 3)
        .with_width(8)
        .with_prior(prior)
        .init::<B>(&device)
        .unwrap();
    let z = Tensor::<B, 2>::ones([2, 4], &device) * 1e6;
    let q = encoder.forward(z.clone(), -z);
    let mu_offset = q.loc.clone() - 0.05;
    assert!(max_abs(mu_offset) <= 5.0 + 1e-4);
    let ls = q.log_scale.clone() - prior.scale.ln();
    let (lo, hi) = (
        ls.clone().min().into_scalar().to_f32(),
        ls.max().into_scalar().to_f32(),
    );
    assert!(lo >= -100.0 - 1e-3 && hi <= 3.0 + 1e-3, "{lo} {hi}");
    let p = vlgo_core::LaplaceParams::<B>::fixed(&prior, [2, 3], &device).unwrap();
    let kl = vlgo_core::kl_divergence(&q, &p).into_scalar().to_f64();
    assert!(kl.is_finite() && kl >= 0.0, "{kl}");
}

#[test]
fn prior_network_gives_one_distribution_per_datum() {
    let device = Default::default();
    let prior = CoefficientPriorConfig::new(6, 5)
        .with_width(4)
        .init::<B>(&device)
        .unwrap();
    let p = prior.forward(Tensor::ones([3, 6], &device));
    assert_eq!(p.dims(), [3, 5]);
    let ls = p.log_scale - FixedPrior::default().scale.ln();
    assert!(ls.max().into_scalar().to_f32() <= 3.0 + 1e-4);
    let e = prior
        .try_forward(Tensor::ones([3, 7], &device))
        .unwrap_err();
    assert!(e.to_string().contains("d = 6"), "{e}");
}

fn model(samples: usize, zeta: f64, learned_prior: bool) -> vlgo_nn::Vlgo<AD> {
    VlgoConfig::new(LieOperatorsConfig::new(4, 3).with_init(OperatorInit::Normal { std: 0.3 }))
        .with_width(8)
        .with_samples(samples)
        .with_learned_prior(learned_prior)
        .with_threshold(Threshold::new(zeta, ThresholdVariant::Noise).unwrap())
        .with_beta(1e-2)
        .init::<AD>(&Default::default())
        .unwrap()
}

#[test]
fn the_step_trains_operators_encoder_and_prior_and_is_reproducible() {
    let device = Default::default();
    let z0 = Tensor::<AD, 2>::random(
        [16, 3],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let z1 = z0.clone() * 1.1;
    let streams = NoiseStreams::new(3);
    for (samples, zeta, learned) in [(1, 0.0, false), (5, 0.01, true)] {
        let model = model(samples, zeta, learned);
        let step = model.step(z0.clone(), z1.clone(), &streams, 7);
        let again = model.step(z0.clone(), z1.clone(), &streams, 7);
        assert_eq!(
            step.coefficients.clone().into_data(),
            again.coefficients.into_data(),
            "same step, same draws"
        );
        let loss = step.loss.clone().into_scalar().to_f64();
        let parts = step.manifold_loss.clone().into_scalar().to_f64()
            + 1e-2 * step.kl.clone().into_scalar().to_f64();
        assert!((loss - parts).abs() <= 1e-5 * loss.abs().max(1.0));
        let grads = step.loss.backward();
        let psi = grad_norm(&model.operators.psi().val(), &grads).unwrap_or(0.0);
        assert!(
            psi.is_finite() && psi > 0.0,
            "the operators' gradient: {psi}"
        );
        let mut encoder_grads = 0;
        model.encoder.visit(&mut CountGrads {
            grads: &grads,
            count: &mut encoder_grads,
        });
        assert!(encoder_grads > 0, "the encoder receives gradient");
        if let Some(prior) = &model.prior {
            let mut prior_grads = 0;
            prior.visit(&mut CountGrads {
                grads: &grads,
                count: &mut prior_grads,
            });
            assert!(
                prior_grads > 0,
                "the learned prior receives gradient through the KL"
            );
        }
    }
}

/// Counts a module's parameters whose gradient is there with a finite, non-zero norm (a
/// gradient that is present but zero does not count).
struct CountGrads<'a> {
    grads: &'a <AD as burn::tensor::backend::AutodiffBackend>::Gradients,
    count: &'a mut usize,
}

impl burn::module::ModuleVisitor<AD> for CountGrads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<AD, D>>) {
        if let Some(g) = param.grad(self.grads) {
            let norm = g.square().sum().into_scalar().to_f64().sqrt();
            if norm.is_finite() && norm > 0.0 {
                *self.count += 1;
            }
        }
    }
}

/// The gradient's norm of a tensor that requires one (None: no gradient reached it).
fn grad_norm<const D: usize>(
    t: &Tensor<AD, D>,
    grads: &<AD as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> Option<f64> {
    t.grad(grads)
        .map(|g| g.square().sum().into_scalar().to_f64().sqrt())
}

#[test]
fn sample_prior_and_configs_reject_bad_input() {
    let device = Default::default();
    let model = model(1, 0.01, false);
    let z0 = Tensor::<AD, 2>::ones([2, 3], &device);
    let c = model.sample_prior(z0.clone(), Tensor::zeros([2, 4], &device));
    // u = 0 is the median: |eps| = 0 < zeta, so the thresholded sample is exactly zero.
    assert_eq!(c.abs().max().into_scalar().to_f32(), 0.0);
    let e = model
        .try_sample_prior(z0.clone(), Tensor::zeros([2, 5], &device))
        .unwrap_err();
    assert!(e.to_string().contains("[2, 4]"), "{e}");
    // The panicking form panics with the same message.
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.sample_prior(z0.clone(), Tensor::zeros([2, 5], &device))
    }))
    .unwrap_err();
    assert_eq!(panic.downcast_ref::<String>(), Some(&e.to_string()));
    let e = model
        .try_infer(z0.clone(), Tensor::ones([2, 4], &device))
        .unwrap_err();
    assert!(e.to_string().contains("feature_dim"), "{e}");
    let stable_odd = VlgoConfig::new(LieOperatorsConfig::new(2, 3))
        .validate()
        .unwrap_err();
    assert!(stable_odd.to_string().contains("even"), "{stable_odd}");
    let bad_width = VlgoConfig::new(LieOperatorsConfig::new(2, 4))
        .with_width(0)
        .validate()
        .unwrap_err();
    assert!(bad_width.to_string().contains("width"), "{bad_width}");
}

#[test]
fn the_stop_gradients_hold_and_ablation_s1_lifts_the_one_on_z1() {
    let device = Default::default();
    let streams = NoiseStreams::new(1);
    for detach_target in [true, false] {
        let model = VlgoConfig::new(
            LieOperatorsConfig::new(4, 3).with_init(OperatorInit::Normal { std: 0.3 }),
        )
        .with_width(8)
        .with_learned_prior(true)
        .with_detach_target(detach_target)
        .init::<AD>(&device)
        .unwrap();
        let z0 = Tensor::<AD, 2>::random(
            [6, 3],
            burn::tensor::Distribution::Normal(0.0, 1.0),
            &device,
        )
        .require_grad();
        let z1 = Tensor::<AD, 2>::from_data((z0.clone().inner() * 1.2 + 0.1).into_data(), &device)
            .require_grad();
        let step = model.step(z0.clone(), z1.clone(), &streams, 0);
        // L_m reaches z0 (it trains the backbone); z1 only without the stop-gradient.
        let grads = step.manifold_loss.clone().backward();
        assert!(grad_norm(&z0, &grads).is_some_and(|g| g > 0.0));
        match detach_target {
            true => assert!(z1.grad(&grads).is_none()),
            false => assert!(grad_norm(&z1, &grads).is_some_and(|g| g > 0.0)),
        }
        // The KL sees only detached features: the encoder and prior learn from it, the
        // features receive nothing.
        let step = model.step(z0.clone(), z1.clone(), &streams, 0);
        let grads = step.kl.backward();
        assert!(z0.grad(&grads).is_none() && z1.grad(&grads).is_none());
        let mut count = 0;
        model.encoder.visit(&mut CountGrads {
            grads: &grads,
            count: &mut count,
        });
        assert!(count > 0);
    }
}

#[test]
fn the_prior_warms_up_from_the_fixed_one_over_w_iterations() {
    let device = Default::default();
    let fixed = FixedPrior {
        shift: 0.05,
        scale: 0.01,
    };
    let model = VlgoConfig::new(LieOperatorsConfig::new(3, 4))
        .with_width(4)
        .with_learned_prior(true)
        .with_fixed_prior(fixed)
        .with_prior_warmup(100)
        .init::<B>(&device)
        .unwrap();
    let z0 = Tensor::<B, 2>::random(
        [5, 4],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let learned = model.prior.as_ref().unwrap().forward(z0.clone());
    let close = |a: Tensor<B, 2>, b: Tensor<B, 2>| max_abs(a - b) < 1e-5;
    let start = model.prior_at(z0.clone(), 0);
    assert!(max_abs(start.loc.clone() - 0.05) < 1e-6);
    assert!(max_abs(start.scale() - 0.01) < 1e-7);
    // Half-way: the paper's blend of locations and of scales (not of log-scales).
    let half = model.prior_at(z0.clone(), 50);
    assert!(close(half.loc.clone(), learned.loc.clone() * 0.5 + 0.025));
    assert!(close(half.scale(), learned.scale() * 0.5 + 0.005));
    for t in [100, 5000] {
        let end = model.prior_at(z0.clone(), t);
        assert!(close(end.loc, learned.loc.clone()));
        assert!(close(end.log_scale, learned.log_scale.clone()));
    }
    // The KL of a step targets the warmed prior: at t = 0 the fixed one.
    let q = model.infer(z0.clone(), z0.clone());
    let want = vlgo_core::kl_divergence(&q, &start).into_scalar().to_f64();
    let step = model.step(z0.clone(), z0, &NoiseStreams::new(0), 0);
    assert!((step.kl.into_scalar().to_f64() - want).abs() <= 1e-6 * want.abs().max(1.0));
}

#[test]
fn best_of_j_starts_at_its_configured_iteration_and_picks_each_datums_best() {
    let device = Default::default();
    let streams = NoiseStreams::new(9);
    let model =
        VlgoConfig::new(LieOperatorsConfig::new(4, 3).with_init(OperatorInit::Normal { std: 0.5 }))
            .with_width(8)
            .with_samples(6)
            .with_best_of_j_from(10)
            .with_threshold(Threshold::new(0.005, ThresholdVariant::Noise).unwrap())
            .init::<B>(&device)
            .unwrap();
    let z0 = Tensor::<B, 2>::random(
        [7, 3],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let z1 = z0.clone() * 0.8 - 0.2;
    let q = model.infer(z0.clone(), z1.clone());
    let error = |c: Tensor<B, 2>| {
        let moved = model.transport(c, z0.clone());
        (moved - z1.clone())
            .square()
            .sum_dim(1)
            .into_data()
            .to_vec::<f32>()
            .unwrap()
    };
    // Before iteration 10: the one sample of stream 0.
    let before = model.step(z0.clone(), z1.clone(), &streams, 9);
    let u = streams.uniform_centered(9, 0, 7 * 4);
    let u = Tensor::<B, 1>::from_floats(u.as_slice(), &device).reshape([7, 4]);
    let single = vlgo_core::sample(&q, u, &model.threshold);
    assert_eq!(before.coefficients.into_data(), single.into_data());
    // From iteration 10: per datum, no candidate of the J streams does better.
    let after = model.step(z0.clone(), z1.clone(), &streams, 10);
    let best = error(after.coefficients);
    for j in 0..6 {
        let u = streams.uniform_centered(10, j, 7 * 4);
        let u = Tensor::<B, 1>::from_floats(u.as_slice(), &device).reshape([7, 4]);
        let candidate = error(vlgo_core::sample(&q, u, &model.threshold));
        for (b, c) in best.iter().zip(&candidate) {
            assert!(
                b <= &(c + 1e-5 * c.max(1.0)),
                "datum error {b} > candidate {c}"
            );
        }
    }
}
