//! FISTA against problems with a closed-form optimum.

use burn::prelude::*;
use vlgo_core::{FistaConfig, LieOperators, OperatorForm, fista};

use crate::common::{B, to_f64};

/// One generator, the 2-D rotation J: T(c) = R(c). For z0 = (r, 0) and z1 = R(theta) z0 the
/// objective is 2 r^2 (1 - cos(c - theta)) + l1 |c|, minimised by
/// c* = sign(theta) max(|theta| - asin(l1 / (2 r^2)), 0).
#[test]
fn fista_reaches_the_closed_form_optimum_of_a_one_operator_problem() {
    let device = Default::default();
    let psi = Tensor::<B, 1>::from_floats([0.0, -1.0, 1.0, 0.0], &device).reshape([1, 1, 2, 2]);
    let ops = LieOperators::from_generators(psi, OperatorForm::Dense, 2).unwrap();
    let l1 = 0.6;
    let cases = [(1.0, 0.8), (1.5, -0.5), (2.0, 1.2), (1.0, 0.2), (1.2, -0.1)];
    let mut z0 = Vec::new();
    let mut z1 = Vec::new();
    let mut expected = Vec::new();
    for (r, theta) in cases {
        z0.extend([r as f32, 0.0]);
        z1.extend([(r * f64::cos(theta)) as f32, (r * f64::sin(theta)) as f32]);
        let shrink = f64::asin(l1 / (2.0 * r * r));
        expected.push(f64::signum(theta) * (theta.abs() - shrink).max(0.0));
    }
    let n = cases.len();
    let z0 = Tensor::<B, 1>::from_floats(z0.as_slice(), &device).reshape([n, 2]);
    let z1 = Tensor::<B, 1>::from_floats(z1.as_slice(), &device).reshape([n, 2]);
    let solution = fista(&ops, z0, z1, &FistaConfig::new().with_l1(l1)).unwrap();
    assert!(solution.converged, "{} iterations", solution.iterations);
    assert!(solution.iterations > 2);
    let got = to_f64(solution.coefficients);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!((g - e).abs() < 2e-3, "datum {i}: got {g}, closed form {e}");
    }
    // The two small rotations are not worth their l1 cost: exactly zero.
    assert_eq!(got[3], 0.0);
    assert_eq!(got[4], 0.0);
}

#[test]
fn fista_rejects_bad_settings_and_shapes() {
    let device = Default::default();
    let ops = vlgo_core::LieOperatorsConfig::new(2, 4)
        .init::<B>(&device)
        .unwrap();
    let z = Tensor::<B, 2>::ones([3, 4], &device);
    let e = fista(
        &ops,
        z.clone(),
        z.clone(),
        &FistaConfig::new().with_tolerance(f64::NAN),
    )
    .unwrap_err();
    assert!(e.to_string().contains("tolerance"), "{e}");
    let e = fista(
        &ops,
        z.clone(),
        Tensor::ones([2, 4], &device),
        &FistaConfig::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("[3, 4]"), "{e}");
    let no_backtracks = FistaConfig::new().with_max_backtracks(0);
    let e = fista(&ops, z.clone(), z.clone(), &no_backtracks).unwrap_err();
    assert!(e.to_string().contains("max_backtracks"), "{e}");
}

#[test]
fn transport_pullback_checks_its_adjoint_and_takes_empty_batches() {
    let device = Default::default();
    let ops = vlgo_core::LieOperatorsConfig::new(2, 4)
        .init::<B>(&device)
        .unwrap();
    let (moved, pullback) = ops.transport_pullback(
        Tensor::zeros([3, 2], &device),
        Tensor::ones([3, 4], &device),
    );
    assert_eq!(pullback.coefficients(moved).dims(), [3, 2]);
    let e = pullback
        .try_coefficients(Tensor::ones([2, 4], &device))
        .unwrap_err();
    assert!(e.to_string().contains("[3, 4]"), "{e}");
    let (moved, pullback) = ops.transport_pullback(
        Tensor::zeros([0, 2], &device),
        Tensor::ones([0, 4], &device),
    );
    assert_eq!(moved.dims(), [0, 4]);
    assert_eq!(pullback.coefficients(moved).dims(), [0, 2]);
}

/// The batch's problems are independent and only the stopping rule is shared, so splitting the
/// batch over threads gives the single thread's coefficients, iterations and convergence: bit for
/// bit on Flex, to rounding on NdArray (whose matmul rounds a row differently depending on where
/// it falls in the product's tiles, and FISTA's iterations carry that on).
#[test]
fn fista_on_several_threads_gives_the_single_thread_answer() {
    let device = Default::default();
    B::seed(&device, 11);
    let ops = vlgo_core::LieOperatorsConfig::new(3, 3)
        .with_init(vlgo_core::OperatorInit::Normal { std: 0.3 })
        .init::<B>(&device)
        .unwrap();
    let z0 = Tensor::<B, 2>::random(
        [19, 3],
        burn::tensor::Distribution::Normal(0.0, 1.0),
        &device,
    );
    let c = Tensor::<B, 2>::random(
        [19, 3],
        burn::tensor::Distribution::Uniform(-0.8, 0.8),
        &device,
    );
    let z1 = ops.transport(c, z0.clone());
    let config = FistaConfig::new()
        .with_max_iterations(20)
        .with_tolerance(1e-6);
    let one = fista(&ops, z0.clone(), z1.clone(), &config).unwrap();
    assert!(one.trials > 0);
    // 19 rows in 2, 3 and 19 chunks (uneven, and one row each); 50 asked is capped at 19.
    for threads in [2, 3, 50] {
        let split = fista(
            &ops,
            z0.clone(),
            z1.clone(),
            &config.clone().with_threads(threads),
        )
        .unwrap();
        assert_eq!(split.iterations, one.iterations, "{threads} threads");
        assert_eq!(split.converged, one.converged, "{threads} threads");
        let diff = (split.coefficients - one.coefficients.clone())
            .abs()
            .max()
            .into_scalar();
        assert!(diff < 1e-4, "{threads} threads: {diff}");
    }
    let e = fista(&ops, z0, z1, &config.with_threads(0)).unwrap_err();
    assert!(e.to_string().contains("threads"), "{e}");
}
