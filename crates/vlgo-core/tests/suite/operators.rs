//! Lie group operators: closed-form transport, block layout, gradients, metrics, bad input.

use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::DType;
use vlgo_core::{
    ExpmvConfig, LieOperatorsConfig, OperatorForm, TransportMethod, VlgoError,
    distance_improvement, manifold_loss,
};

use crate::common::*;

fn features<BK: Backend>(r: &mut vlgo_core::StreamRng, n: usize, d: usize) -> Tensor<BK, 2> {
    let data: Vec<f64> = (0..n * d).map(|_| gaussian(r)).collect();
    Tensor::<BK, 1>::from_data(
        TensorData::new(data, [n * d]),
        (&Default::default(), DType::F32),
    )
    .reshape([n, d])
}

#[test]
fn transport_of_the_initialisation_has_its_closed_form() {
    let device = device();
    let mut r = rng(41);
    let (m, d, b) = (3, 8, 4);
    let ops = LieOperatorsConfig::new(m, d)
        .with_form(OperatorForm::BlockDiagonal(b))
        .with_seed(5)
        .init::<B>(&device)
        .unwrap();
    let psi = to_f64(ops.psi().val());
    let z = features::<B>(&mut r, 2, d);
    let c = Tensor::<B, 2>::from_data([[0.7, 0.0, 0.0], [0.0, 0.0, -1.3]], &device);
    for method in [
        TransportMethod::Expmv,
        TransportMethod::Expm,
        TransportMethod::Generated,
    ] {
        let moved = to_f64(
            ops.transport_with(c.clone(), z.clone(), method, &ExpmvConfig::default())
                .unwrap(),
        );
        let zh = to_f64(z.clone());
        for (row, (mi, cv)) in [(0usize, 0.7f64), (2, -1.3)].iter().enumerate() {
            for s in 0..d / b {
                // Psi[m, s] = r I + w J; read r and w back from the block.
                let off = (mi * (d / b) + s) * b * b;
                let (rr, w) = (psi[off], psi[off + b]); // [0,0] and [1,0]
                let (g, cs, sn) = ((cv * rr).exp(), (cv * w).cos(), (cv * w).sin());
                for k in 0..b / 2 {
                    let (i, j) = (s * b + 2 * k, s * b + 2 * k + 1);
                    let (x, y) = (zh[row * d + i], zh[row * d + j]);
                    // J = [[0, -1], [1, 0]]: (x, y) -> (cos x - sin y, sin x + cos y)
                    let want = [g * (cs * x - sn * y), g * (sn * x + cs * y)];
                    let got = [moved[row * d + i], moved[row * d + j]];
                    for t in 0..2 {
                        assert!(
                            (got[t] - want[t]).abs() < 1e-5,
                            "{method:?}: {got:?} vs {want:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn block_diagonal_equals_the_dense_block_matrix_and_direct_leaves_the_tail() {
    let device = device();
    let mut r = rng(42);
    let (m, d, b) = (2, 6, 2);
    let ops = LieOperatorsConfig::new(m, d)
        .with_form(OperatorForm::BlockDiagonal(b))
        .init::<B>(&device)
        .unwrap();
    // Perturb the generators so blocks differ from the initialisation form.
    let noise = features::<B>(&mut r, m * 3 * b, b).reshape([m, 3, b, b]) * 0.3;
    let ops =
        vlgo_core::LieOperators::from_generators(ops.psi().val() + noise, ops.form(), d).unwrap();
    let c = features::<B>(&mut r, 4, m);
    let z = features::<B>(&mut r, 4, d);
    let moved = to_f64(ops.transport(c.clone(), z.clone()));
    // Dense reference: expm of the assembled block-diagonal generator.
    let blocks = to_f64(ops.transforms(c.clone())); // [4, 3, b, b]
    let zh = to_f64(z);
    for row in 0..4 {
        for s in 0..3 {
            for i in 0..b {
                let want: f64 = (0..b)
                    .map(|j| blocks[((row * 3 + s) * b + i) * b + j] * zh[row * d + s * b + j])
                    .sum();
                assert!((moved[row * d + s * b + i] - want).abs() < 1e-5);
            }
        }
    }
    let direct = LieOperatorsConfig::new(m, d)
        .with_form(OperatorForm::Direct(4))
        .init::<B>(&device)
        .unwrap();
    let z = features::<B>(&mut r, 4, d);
    let moved = to_f64(direct.transport(c, z.clone()));
    let zh = to_f64(z);
    for row in 0..4 {
        assert_eq!(
            moved[row * d + 4..row * d + 6],
            zh[row * d + 4..row * d + 6]
        );
    }
}

#[test]
fn gradients_reach_coefficients_and_generators_through_transport() {
    let device = device();
    let mut r = rng(43);
    let (m, d) = (3, 4);
    let ops = LieOperatorsConfig::new(m, d)
        .with_init_beta(2.0)
        .init::<AD>(&device)
        .unwrap();
    let c = features::<AD>(&mut r, 2, m).require_grad();
    let z = features::<AD>(&mut r, 2, d).require_grad();
    let target = features::<AD>(&mut r, 2, d);
    let grads_of = |method| {
        let moved = ops
            .transport_with(c.clone(), z.clone(), method, &ExpmvConfig::default())
            .unwrap();
        let loss = manifold_loss(moved, target.clone());
        let g = loss.backward();
        (
            to_f64(c.grad(&g).unwrap()),
            to_f64(ops.psi().grad(&g).unwrap()),
            to_f64(z.grad(&g).unwrap()),
        )
    };
    let (gc1, gp1, gz1) = grads_of(TransportMethod::Expmv);
    assert!(gc1.iter().any(|x| x.abs() > 1e-6) && gp1.iter().any(|x| x.abs() > 1e-6));
    // Tracked, the generated method forms the generators by a matmul and records it.
    for method in [TransportMethod::Expm, TransportMethod::Generated] {
        let (gc2, gp2, gz2) = grads_of(method);
        assert!(rel_frobenius_host(&gc1, &gc2) < 1e-4, "{method:?}");
        assert!(rel_frobenius_host(&gp1, &gp2) < 1e-4, "{method:?}");
        assert!(rel_frobenius_host(&gz1, &gz2) < 1e-4, "{method:?}");
    }
    // Finite differences in c (f32 forward, so a loose but meaningful bar).
    let base = |cv: Tensor<B, 2>| {
        let ops_b = ops.clone().valid();
        let moved = ops_b.transport(cv, z.clone().inner());
        manifold_loss(moved, target.clone().inner())
            .into_scalar()
            .to_f64()
    };
    let c0 = to_f64(c.clone().inner());
    let h = 1e-2;
    for k in 0..c0.len() {
        let mut p = c0.clone();
        let mut q = c0.clone();
        p[k] += h;
        q[k] -= h;
        let mk = |v: Vec<f64>| {
            Tensor::<B, 1>::from_data(TensorData::new(v, [2 * m]), (&device, DType::F32))
                .reshape([2, m])
        };
        let fd = (base(mk(p)) - base(mk(q))) / (2.0 * h);
        assert!(
            (fd - gc1[k]).abs() < 2e-3 * (1.0 + fd.abs()),
            "c[{k}]: {fd} vs {}",
            gc1[k]
        );
    }
}

#[test]
fn metrics_norms_usage_and_eigenvalues() {
    let device = device();
    let ops = LieOperatorsConfig::new(3, 4)
        .with_form(OperatorForm::BlockDiagonal(2))
        .init::<B>(&device)
        .unwrap();
    let norms = to_f64(ops.generator_norms());
    let psi = to_f64(ops.psi().val());
    for (mi, nv) in norms.iter().enumerate() {
        let want: f64 = psi[mi * 8..(mi + 1) * 8]
            .iter()
            .map(|x| x * x)
            .sum::<f64>()
            .sqrt();
        assert!((nv - want).abs() < 1e-5);
    }
    let c = Tensor::<B, 2>::from_data([[0.0, 0.5, 0.0], [0.0, -0.1, 0.0]], &device);
    assert_eq!(ops.usage_count(c), 1);
    // r I + w J has eigenvalues r +- i w: real parts r, at most alpha / 2 = 5e-5.
    for re in ops.eigenvalue_real_parts().concat() {
        assert!(re.abs() <= 5e-5 + 1e-7, "{re}");
    }
}

#[test]
fn distance_improvement_and_stop_gradient_on_the_target() {
    let device = device();
    let z0 = Tensor::<AD, 2>::from_data([[0.0, 0.0], [1.0, 1.0]], &device);
    let z1 = Tensor::<AD, 2>::from_data([[2.0, 0.0], [1.0, 3.0]], &device).require_grad();
    let half = (z0.clone() + z1.clone()) / 2.0;
    // Halfway: the squared distance drops to a quarter.
    let di = distance_improvement(z0.clone(), z1.clone(), half);
    assert!((di - 0.25).abs() < 1e-5, "{di}");
    let zh = z0.clone().require_grad();
    let g = manifold_loss(zh.clone(), z1.clone()).backward();
    assert!(z1.grad(&g).is_none(), "the target is detached");
    // d/dz0 of mean (z0 - z1)^2 over the 4 entries: (z0 - z1) / 2.
    let grad: Vec<f32> = zh
        .grad(&g)
        .unwrap()
        .into_data()
        .convert::<f32>()
        .into_vec()
        .unwrap();
    assert_eq!(grad, [-1.0, 0.0, 0.0, -1.0]);
}

#[test]
fn bad_operator_configurations_and_shapes_are_errors() {
    let device = device();
    let odd = LieOperatorsConfig::new(2, 6).with_form(OperatorForm::BlockDiagonal(3));
    let e = odd.init::<B>(&device).unwrap_err();
    assert!(e.to_string().contains("even"), "{e}");
    let e = LieOperatorsConfig::new(2, 10)
        .with_form(OperatorForm::BlockDiagonal(4))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("4 for d = 10"), "{e}");
    assert!(matches!(
        LieOperatorsConfig::new(0, 4).validate(),
        Err(VlgoError::InvalidParameter { .. })
    ));
    assert!(
        LieOperatorsConfig::new(2, 5).validate().is_err(),
        "odd dense d"
    );
    let ops = LieOperatorsConfig::new(2, 4).init::<B>(&device).unwrap();
    let e = ops
        .try_transport(
            Tensor::zeros([3, 5], &device),
            Tensor::zeros([3, 4], &device),
        )
        .unwrap_err();
    assert!(e.to_string().contains("M = 2"), "{e}");
    let e = ops
        .try_transport(
            Tensor::zeros([3, 2], &device),
            Tensor::zeros([2, 4], &device),
        )
        .unwrap_err();
    assert!(e.to_string().contains("[2, 4]"), "{e}");
}
