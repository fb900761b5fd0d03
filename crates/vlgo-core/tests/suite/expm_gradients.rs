//! Gradients of the exponential against float64 finite differences and the float64 block trick
//! (`expm.md`, "Gradients").

use burn::tensor::DType;
use vlgo_core::{ExpmConfig, ExpmMethod, expm_with};

use crate::common::*;

/// d/dA sum(G * expm(A)) by central differences in f64, on the forward of the test backend.
fn finite_difference(a: &[f64], g: &[f64], n: usize, method: ExpmMethod) -> Vec<f64> {
    let h = 1e-6 * (1.0 + one_norm(a, n));
    let mut perturbed = Vec::with_capacity(2 * n * n * n * n);
    for k in 0..n * n {
        for sign in [1.0, -1.0] {
            let mut p = a.to_vec();
            p[k] += sign * h;
            perturbed.extend(p);
        }
    }
    let cfg = ExpmConfig::new().with_method(method);
    let out = to_f64(expm_with(batch::<B>(&perturbed, n, DType::F64), &cfg).unwrap());
    (0..n * n)
        .map(|k| {
            let plus = &out[(2 * k) * n * n..(2 * k + 1) * n * n];
            let minus = &out[(2 * k + 1) * n * n..(2 * k + 2) * n * n];
            plus.iter()
                .zip(minus)
                .zip(g)
                .map(|((p, m), w)| w * (p - m) / (2.0 * h))
                .sum()
        })
        .collect()
}

/// Our gradient of sum(G * expm(A)) through Autodiff, in the given dtype.
fn autodiff_gradient(a: &[f64], g: &[f64], n: usize, dtype: DType, method: ExpmMethod) -> Vec<f64> {
    let at = batch::<AD>(a, n, dtype).require_grad();
    let gt = batch::<AD>(g, n, dtype);
    let out = expm_with(at.clone(), &ExpmConfig::new().with_method(method)).unwrap();
    let grads = (out * gt).sum().backward();
    to_f64(at.grad(&grads).expect("A receives a gradient"))
}

#[test]
fn gradients_match_float64_finite_differences() {
    if !supports_f64() {
        return;
    }
    let mut r = rng(21);
    let n = 4;
    for method in [ExpmMethod::Pade, ExpmMethod::Taylor] {
        // Norms that exercise low degrees, the top degree and several squarings.
        for norm in [0.05, 0.3, 1.5, 3.5, 12.0, 40.0] {
            let a = random_matrix(&mut r, n, norm);
            let g = random_matrix(&mut r, n, 1.0);
            let fd = finite_difference(&a, &g, n, method);
            let ours32 = autodiff_gradient(&a, &g, n, DType::F32, method);
            let err32 = rel_frobenius_host(&ours32, &fd);
            assert!(err32 <= 1e-4, "{method:?} norm {norm}: f32 {err32:.3e}");
            let ours64 = autodiff_gradient(&a, &g, n, DType::F64, method);
            let err64 = rel_frobenius_host(&ours64, &fd);
            assert!(err64 <= 1e-7, "{method:?} norm {norm}: f64 {err64:.3e}");
        }
    }
}

#[test]
fn gradients_match_the_float64_block_trick_at_n_32() {
    let mut r = rng(22);
    let n = 32;
    for method in [ExpmMethod::Pade, ExpmMethod::Taylor] {
        for norm in [1.6, 10.0] {
            let a = random_matrix(&mut r, n, norm);
            let g = random_matrix(&mut r, n, 1.0);
            let reference = block_trick(&a, &g, n);
            let ours = autodiff_gradient(&a, &g, n, DType::F32, method);
            let err = rel_frobenius_host(&ours, &reference);
            assert!(err <= 1e-4, "{method:?} norm {norm}: {err:.3e}");
        }
    }
}

#[test]
fn gradient_accuracy_does_not_depend_on_the_upstream_scale() {
    let mut r = rng(23);
    let n = 16;
    let a = random_matrix(&mut r, n, 8.0);
    let g = random_matrix(&mut r, n, 1.0);
    let big: Vec<f64> = g.iter().map(|x| x * 65536.0).collect();
    let reference = block_trick(&a, &g, n);
    for method in [ExpmMethod::Pade, ExpmMethod::Taylor] {
        let small = autodiff_gradient(&a, &g, n, DType::F32, method);
        let scaled: Vec<f64> = autodiff_gradient(&a, &big, n, DType::F32, method)
            .iter()
            .map(|x| x / 65536.0)
            .collect();
        let (e1, e2) = (
            rel_frobenius_host(&small, &reference),
            rel_frobenius_host(&scaled, &reference),
        );
        assert!(e1 <= 1e-4, "{method:?}: {e1:.3e}");
        assert!(
            (e2 - e1).abs() <= 0.01 * e1 + 1e-9,
            "{method:?}: {e1:.3e} at scale 1, {e2:.3e} at scale 2^16"
        );
    }
}

#[test]
fn gradients_of_a_mixed_batch_equal_the_per_matrix_gradients() {
    let mut r = rng(24);
    let n = 5;
    let mats: Vec<Vec<f64>> = [0.1, 30.0, 1.0, 5.0]
        .iter()
        .map(|&s| random_matrix(&mut r, n, s))
        .collect();
    let gs: Vec<Vec<f64>> = (0..4).map(|_| random_matrix(&mut r, n, 1.0)).collect();
    let together = autodiff_gradient(
        &mats.concat(),
        &gs.concat(),
        n,
        DType::F32,
        ExpmMethod::Pade,
    );
    for k in 0..4 {
        let alone = autodiff_gradient(&mats[k], &gs[k], n, DType::F32, ExpmMethod::Pade);
        let part = &together[k * n * n..(k + 1) * n * n];
        assert!(rel_frobenius_host(part, &alone) < 1e-6, "matrix {k}");
    }
}
