//! Laplace sampling, thresholds, KL, prior blend and best-of-J. Statistical tests use fixed
//! seeds and tolerances of at least 4 standard errors, stated at each assertion.

use burn::prelude::*;
use vlgo_core::{
    FixedPrior, LaplaceParams, LieOperatorsConfig, NoiseStreams, Threshold, ThresholdVariant,
    TransportMethod, WarmupBlend, best_of_j, best_of_j_seeded, best_of_j_with, kl_divergence,
    sample, warmup_prior,
};

use crate::common::*;

fn full<BK: Backend>(shape: [usize; 2], v: f64) -> Tensor<BK, 2> {
    Tensor::full(shape, v, &Default::default())
}

fn uniform<BK: Backend>(streams: &NoiseStreams, step: u64, shape: [usize; 2]) -> Tensor<BK, 2> {
    let u = streams.uniform_centered(step, 0, shape[0] * shape[1]);
    Tensor::<BK, 1>::from_floats(u.as_slice(), &Default::default()).reshape(shape)
}

fn zero_fraction(c: Tensor<B, 2>) -> f64 {
    let v = to_f64(c);
    v.iter().filter(|x| **x == 0.0).count() as f64 / v.len() as f64
}

const DRAWS: [usize; 2] = [200, 250]; // 50 000 samples per estimate

#[test]
fn plain_laplace_samples_have_the_right_moments() {
    let (mu, s) = (0.3, 0.5);
    let p = LaplaceParams::<B>::new(full(DRAWS, mu), full(DRAWS, f64::ln(s))).unwrap();
    let c = to_f64(sample(
        &p,
        uniform(&NoiseStreams::new(1), 0, DRAWS),
        &Threshold::none(),
    ));
    let n = c.len() as f64;
    let mean = c.iter().sum::<f64>() / n;
    let mad = c.iter().map(|x| (x - mu).abs()).sum::<f64>() / n;
    // mean: sd = sqrt(2) s / sqrt(n) = 3.2e-3; E|c - mu| = s with sd s / sqrt(n) = 2.2e-3.
    assert!((mean - mu).abs() < 0.013, "{mean}");
    assert!((mad - s).abs() < 0.009, "{mad}");
}

#[test]
fn noise_threshold_zeroes_with_probability_one_minus_exp() {
    for (mu, s, zeta) in [(0.05, 0.01, 0.01), (2.0, 0.3, 0.1), (-1.0, 0.05, 0.2)] {
        let p = LaplaceParams::<B>::new(full(DRAWS, mu), full(DRAWS, f64::ln(s))).unwrap();
        let th = Threshold::new(zeta, ThresholdVariant::Noise).unwrap();
        let frac = zero_fraction(sample(&p, uniform(&NoiseStreams::new(2), 0, DRAWS), &th));
        let want = 1.0 - (-zeta / s).exp();
        // Binomial sd <= 0.5 / sqrt(50 000) = 2.2e-3; tolerance 0.01 (> 4 sd).
        assert!(
            (frac - want).abs() < 0.01,
            "mu {mu} s {s} zeta {zeta}: {frac} vs {want}"
        );
    }
}

#[test]
fn sample_threshold_zeroes_with_probability_of_the_interval() {
    let cdf = |x: f64, mu: f64, s: f64| {
        if x < mu {
            0.5 * ((x - mu) / s).exp()
        } else {
            1.0 - 0.5 * (-(x - mu) / s).exp()
        }
    };
    for (mu, s, zeta) in [(0.05, 0.01, 0.01), (0.0, 0.5, 0.2), (0.3, 0.2, 0.25)] {
        let p = LaplaceParams::<B>::new(full(DRAWS, mu), full(DRAWS, f64::ln(s))).unwrap();
        let th = Threshold::new(zeta, ThresholdVariant::Sample).unwrap();
        let c = sample(&p, uniform(&NoiseStreams::new(3), 0, DRAWS), &th);
        let frac = zero_fraction(c.clone());
        let want = cdf(zeta, mu, s) - cdf(-zeta, mu, s);
        assert!(
            (frac - want).abs() < 0.01,
            "mu {mu} s {s} zeta {zeta}: {frac} vs {want}"
        );
        // Survivors are shrunk toward zero by exactly zeta.
        let raw = to_f64(sample(
            &p,
            uniform(&NoiseStreams::new(3), 0, DRAWS),
            &Threshold::none(),
        ));
        for (cv, rv) in to_f64(c).iter().zip(&raw).take(500) {
            if *cv != 0.0 {
                assert!((cv.abs() - (rv.abs() - zeta)).abs() < 1e-5);
            }
        }
    }
}

#[test]
fn straight_through_gradients_reach_location_and_scale_of_zeroed_entries() {
    let device = device();
    for variant in [ThresholdVariant::Noise, ThresholdVariant::Sample] {
        let loc = Tensor::<AD, 2>::full([1, 4], 0.05, &device).require_grad();
        let ls = Tensor::<AD, 2>::full([1, 4], f64::ln(0.01), &device).require_grad();
        let p = LaplaceParams::new(loc.clone(), ls.clone()).unwrap();
        // u = 0.01 gives |eps| = 2e-4 < zeta: the value is 0 in both variants here.
        let u = Tensor::<AD, 2>::from_data([[0.01, -0.01, 0.02, -0.02]], &device);
        let c = sample(&p, u, &Threshold::new(0.1, variant).unwrap());
        assert!(to_f64(c.clone()).iter().all(|x| *x == 0.0), "{variant:?}");
        let g = (c * 3.0).sum().backward();
        let gl = to_f64(loc.grad(&g).unwrap());
        let gs = to_f64(ls.grad(&g).unwrap());
        assert!(
            gl.iter().all(|x| (x - 3.0).abs() < 1e-6),
            "{variant:?} dloc {gl:?}"
        );
        assert!(
            gs.iter().all(|x| x.abs() > 0.0 && x.is_finite()),
            "{variant:?} dlogs {gs:?}"
        );
    }
}

fn laplace_logpdf(x: f64, mu: f64, s: f64) -> f64 {
    -(x - mu).abs() / s - (2.0 * s).ln()
}

#[test]
fn kl_matches_a_monte_carlo_estimate() {
    let mut r = rng(51);
    for (m1, s1, m2, s2) in [
        (0.0, 1.0, 0.5, 2.0),
        (0.05, 0.01, 0.05, 0.01),
        (1.0, 0.3, -0.2, 0.8),
        (0.1, 0.02, 0.05, 0.01),
    ] {
        let q = LaplaceParams::<B>::new(full([1, 1], m1), full([1, 1], f64::ln(s1))).unwrap();
        let p = LaplaceParams::<B>::new(full([1, 1], m2), full([1, 1], f64::ln(s2))).unwrap();
        let kl = kl_divergence(&q, &p).into_scalar().to_f64();
        let n = 200_000;
        let terms: Vec<f64> = (0..n)
            .map(|_| {
                let u: f64 = rand::Rng::random::<f64>(&mut r) - 0.5;
                let x = m1 - s1 * u.signum() * (1.0 - 2.0 * u.abs()).max(1e-300).ln();
                laplace_logpdf(x, m1, s1) - laplace_logpdf(x, m2, s2)
            })
            .collect();
        let mean = terms.iter().sum::<f64>() / n as f64;
        let var = terms.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let se = (var / n as f64).sqrt();
        // 5 standard errors, plus f32 rounding of the closed form.
        assert!(
            (kl - mean).abs() <= 5.0 * se + 1e-5 * (1.0 + mean.abs()),
            "{kl} vs {mean} +- {se}"
        );
    }
}

#[test]
fn kl_is_finite_at_the_clamp_limits_with_finite_gradients() {
    let device = device();
    let lo = -100.0 + f64::ln(0.01); // encoder clamp: e^-104.6 underflows in f32
    let hi = 3.0 + f64::ln(0.01);
    for (ls1, ls2, d) in [
        (lo, hi, 0.0),
        (lo, hi, 10.0),
        (lo, f64::ln(0.01), 0.0),
        (hi, f64::ln(0.01), 0.0),
        (hi, hi, 5.0),
    ] {
        let loc = Tensor::<AD, 2>::full([2, 3], 0.05 + d, &device).require_grad();
        let ls = Tensor::<AD, 2>::full([2, 3], ls1, &device).require_grad();
        let q = LaplaceParams::new(loc.clone(), ls.clone()).unwrap();
        let p = LaplaceParams::new(
            Tensor::<AD, 2>::full([2, 3], 0.05, &device),
            Tensor::<AD, 2>::full([2, 3], ls2, &device),
        )
        .unwrap();
        let kl = kl_divergence(&q, &p);
        let v = kl.clone().into_scalar().to_f64();
        assert!(
            v.is_finite() && v >= -1e-3,
            "ls1 {ls1} ls2 {ls2} d {d}: {v}"
        );
        let g = kl.backward();
        assert!(to_f64(loc.grad(&g).unwrap()).iter().all(|x| x.is_finite()));
        assert!(to_f64(ls.grad(&g).unwrap()).iter().all(|x| x.is_finite()));
    }
}

#[test]
fn warmup_blends_toward_the_fixed_prior() {
    let fixed = FixedPrior::default();
    let learned = LaplaceParams::<B>::new(full([1, 2], -0.4), full([1, 2], f64::ln(0.2))).unwrap();
    let at = |t, blend| {
        let p = warmup_prior(&learned, &fixed, t, 100, blend);
        (to_f64(p.loc)[0], to_f64(p.log_scale.exp())[0])
    };
    let (mu, s) = at(0, WarmupBlend::Paper);
    assert!((mu - 0.05).abs() < 1e-6 && (s - 0.01).abs() < 1e-6);
    let (mu, s) = at(25, WarmupBlend::Paper);
    assert!((mu - (0.25 * -0.4 + 0.75 * 0.05)).abs() < 1e-6);
    assert!((s - (0.25 * 0.2 + 0.75 * 0.01)).abs() < 1e-6);
    let (mu, s) = at(25, WarmupBlend::PublicCode);
    assert!(
        (mu - (0.25 * -0.4 - 0.75 * 0.05)).abs() < 1e-6,
        "sign of the learned location"
    );
    assert!((s - (0.25 * 0.2f64.ln() + 0.75 * 0.01f64.ln()).exp()).abs() < 1e-6);
    let (mu, _) = at(500, WarmupBlend::Paper);
    assert!((mu + 0.4).abs() < 1e-6);
}

#[test]
fn best_of_j_returns_the_per_datum_argmin_and_only_the_winner_has_gradient() {
    let device = device();
    let mut r = rng(52);
    let (m, d, n, j) = (3, 4, 5, 6);
    let ops = LieOperatorsConfig::new(m, d)
        .with_init_beta(2.0)
        .init::<AD>(&device)
        .unwrap();
    let z0: Vec<f64> = (0..n * d).map(|_| gaussian(&mut r)).collect();
    let z0 = Tensor::<AD, 1>::from_floats(
        z0.iter().map(|x| *x as f32).collect::<Vec<_>>().as_slice(),
        &device,
    )
    .reshape([n, d]);
    let c_true = Tensor::<AD, 2>::full([n, m], 0.3, &device);
    let z1 = ops.transport(c_true, z0.clone()).detach();
    let loc = Tensor::<AD, 2>::full([n, m], 0.2, &device).require_grad();
    let ls = Tensor::<AD, 2>::full([n, m], f64::ln(0.2), &device).require_grad();
    let params = LaplaceParams::new(loc.clone(), ls.clone()).unwrap();
    let th = Threshold::new(0.05, ThresholdVariant::Noise).unwrap();
    let streams = NoiseStreams::new(9);
    let draws: Vec<Tensor<AD, 2>> = (0..j as u64)
        .map(|k| {
            let u = streams.uniform_centered(0, k, n * m);
            Tensor::<AD, 1>::from_floats(u.as_slice(), &device).reshape([n, m])
        })
        .collect();
    let best = best_of_j(&ops, &params, z0.clone(), z1.clone(), &th, draws.clone()).unwrap();
    // Errors of every candidate, recomputed independently.
    let mut errs = vec![vec![0.0; j]; n];
    for (k, u) in draws.iter().enumerate() {
        let c = sample(&params.detach(), u.clone(), &th);
        let e = to_f64(
            (ops.transport(c, z0.clone()) - z1.clone())
                .square()
                .sum_dim(1),
        );
        for i in 0..n {
            errs[i][k] = e[i];
        }
    }
    for (i, row) in errs.iter().enumerate() {
        let argmin = (0..j).min_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
        assert_eq!(best.winners()[i], argmin, "datum {i}: {row:?}");
    }
    // The seeded form draws the same numbers.
    let seeded =
        best_of_j_seeded(&ops, &params, z0.clone(), z1.clone(), &th, &streams, 0, j).unwrap();
    assert_eq!(seeded.winners(), best.winners());
    // Candidates transported with their generators formed in the kernel (on GPU backends) pick
    // the same winners.
    let generated = best_of_j_with(
        &ops,
        &params,
        z0.clone(),
        z1.clone(),
        &th,
        draws.clone(),
        TransportMethod::Generated,
    )
    .unwrap();
    assert_eq!(generated.winners(), best.winners());
    let (e1, e2) = (to_f64(best.error.clone()), to_f64(generated.error));
    assert!(rel_frobenius_host(&e1, &e2) < 1e-4, "{e1:?} vs {e2:?}");
    // A first candidate whose transport is NaN never wins (checked to be NaN on this backend).
    let nan = Tensor::<AD, 2>::full([n, m], f64::NAN, &device);
    let c_nan = sample(&params.detach(), nan.clone(), &th);
    let e_nan = to_f64(
        (ops.transport(c_nan, z0.clone()) - z1.clone())
            .square()
            .sum_dim(1),
    );
    assert!(e_nan.iter().all(|e| e.is_nan()), "NaN draws: {e_nan:?}");
    let with_nan = best_of_j(
        &ops,
        &params,
        z0.clone(),
        z1.clone(),
        &th,
        std::iter::once(nan).chain(draws.clone()),
    )
    .unwrap();
    let shifted: Vec<usize> = best.winners().iter().map(|w| w + 1).collect();
    assert_eq!(with_nan.winners(), shifted);
    let e3 = to_f64(with_nan.error);
    assert!(rel_frobenius_host(&e3, &e1) < 1e-6, "{e3:?} vs {e1:?}");
    // Gradient: equal to that of the winner re-formed alone.
    let g = best.coefficients.clone().sum().backward();
    let gl_best = to_f64(ls.grad(&g).unwrap());
    let alone = sample(&params, best.noise.clone(), &th);
    let g2 = alone.sum().backward();
    assert_eq!(gl_best, to_f64(ls.grad(&g2).unwrap()));
    assert!(
        ops.psi().grad(&g).is_none(),
        "candidates do not enter the graph"
    );
}

#[test]
fn negative_or_nan_thresholds_and_bad_priors_are_errors() {
    assert!(Threshold::new(-0.1, ThresholdVariant::Noise).is_err());
    assert!(
        Threshold::new(f64::NAN, ThresholdVariant::Sample)
            .unwrap_err()
            .to_string()
            .contains("NaN")
    );
    assert!(
        FixedPrior {
            shift: 0.0,
            scale: 0.0
        }
        .validate()
        .is_err()
    );
    assert!(
        FixedPrior {
            shift: f64::NAN,
            scale: 0.1
        }
        .validate()
        .is_err()
    );
    let e = LaplaceParams::<B>::new(full([2, 3], 0.0), full([2, 4], 0.0)).unwrap_err();
    assert!(e.to_string().contains("[2, 4]"), "{e}");
}
