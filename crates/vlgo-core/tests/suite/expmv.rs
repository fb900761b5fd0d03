//! Exponential times vector: agreement with expm(A) v, the fallback, and its adjoint.

use burn::prelude::*;
use burn::tensor::DType;
use vlgo_core::{ExpmvConfig, expmv_with};

use crate::common::*;

fn vectors(r: &mut rand::rngs::StdRng, count: usize, n: usize) -> Vec<f64> {
    (0..count * n).map(|_| gaussian(r)).collect()
}

fn vec_tensor<BK: Backend>(data: &[f64], n: usize, dtype: DType) -> Tensor<BK, 2> {
    Tensor::<BK, 1>::from_data(
        TensorData::new(data.to_vec(), [data.len()]),
        (&Default::default(), dtype),
    )
    .reshape([data.len() / n, n])
}

fn reference(a: &[f64], v: &[f64], n: usize) -> Vec<f64> {
    let count = v.len() / n;
    let mut out = Vec::with_capacity(v.len());
    for k in 0..count {
        let e = reference_expm(&a[k * n * n..(k + 1) * n * n], n);
        for i in 0..n {
            out.push((0..n).map(|j| e[i * n + j] * v[k * n + j]).sum());
        }
    }
    out
}

#[test]
fn expmv_equals_expm_times_v_across_norms() {
    let mut r = rng(31);
    let n = 16;
    for cfg in [
        ExpmvConfig::new(),
        ExpmvConfig::new().with_m_max(24),
        ExpmvConfig::new().with_shift(false),
        ExpmvConfig::new().with_fallback(false),
        ExpmvConfig::new().with_tol(0.0),
    ] {
        let norms = [0.0, 1e-3, 0.3, 1.6, 10.0, 60.0, 300.0];
        let mats: Vec<Vec<f64>> = norms.iter().map(|&s| random_matrix(&mut r, n, s)).collect();
        // Rotations: large 1-norm, bounded result; and a shifted one (trace far from 0).
        let (rot, _) = rotation_blocks(&[0.5, 3.0, 9.0, 25.0, 1.0, 2.0, 4.0, 8.0], -0.05);
        let shifted: Vec<f64> = mats[3]
            .iter()
            .enumerate()
            .map(|(k, x)| if k % (n + 1) == 0 { x - 4.0 } else { *x })
            .collect();
        let all = [mats.concat(), rot.clone(), shifted.clone()].concat();
        let count = all.len() / (n * n);
        let v = vectors(&mut r, count, n);
        let y = expmv_with(
            batch::<B>(&all, n, DType::F32),
            vec_tensor::<B>(&v, n, DType::F32),
            &cfg,
        )
        .unwrap();
        let y = to_f64(y);
        let want = reference(&all, &v, n);
        for k in 0..count {
            let a = &all[k * n * n..(k + 1) * n * n];
            let err = rel_frobenius_host(&y[k * n..(k + 1) * n], &want[k * n..(k + 1) * n]);
            // exp(A) v is as well conditioned as exp(A); allow the expm bar with the norm.
            let bar = 10.0 * (1.0 + two_norm(a, n)) * U32 * 4.0;
            assert!(
                err <= bar.max(1e-6),
                "{cfg:?} matrix {k}: {err:.3e} > {bar:.3e}"
            );
        }
    }
}

#[test]
fn expmv_in_f64_is_the_oracle() {
    if !supports_f64() {
        return;
    }
    let mut r = rng(32);
    let n = 8;
    let a = [
        random_matrix(&mut r, n, 0.7),
        random_matrix(&mut r, n, 20.0),
    ]
    .concat();
    let v = vectors(&mut r, 2, n);
    let y = expmv_with(
        batch::<B>(&a, n, DType::F64),
        vec_tensor::<B>(&v, n, DType::F64),
        &ExpmvConfig::new(),
    )
    .unwrap();
    assert!(rel_frobenius_host(&to_f64(y), &reference(&a, &v, n)) < 1e-12);
}

/// d/dA, d/dv of sum(g * expmv(A, v)) by our adjoint.
fn adjoint(a: &[f64], v: &[f64], g: &[f64], n: usize, cfg: &ExpmvConfig) -> (Vec<f64>, Vec<f64>) {
    let at = batch::<AD>(a, n, DType::F32).require_grad();
    let vt = vec_tensor::<AD>(v, n, DType::F32).require_grad();
    let gt = vec_tensor::<AD>(g, n, DType::F32);
    let y = expmv_with(at.clone(), vt.clone(), cfg).unwrap();
    let grads = (y * gt).sum().backward();
    (
        to_f64(at.grad(&grads).expect("A gets a gradient")),
        to_f64(vt.grad(&grads).expect("v gets a gradient")),
    )
}

/// The exact gradients from float64 references: dA = block trick with G = g v^T, dv = expm(A)^T g.
fn exact(a: &[f64], v: &[f64], g: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let count = v.len() / n;
    let mut ga = Vec::new();
    let mut gv = Vec::new();
    for k in 0..count {
        let ak = nalgebra::DMatrix::from_row_slice(n, n, &a[k * n * n..(k + 1) * n * n]);
        let vk = nalgebra::DVector::from_row_slice(&v[k * n..(k + 1) * n]);
        let gk = nalgebra::DVector::from_row_slice(&g[k * n..(k + 1) * n]);
        let outer = &gk * vk.transpose();
        ga.extend(block_trick(
            &a[k * n * n..(k + 1) * n * n],
            &row_major(&outer),
            n,
        ));
        gv.extend((ak.exp().transpose() * gk).iter().copied());
    }
    (ga, gv)
}

#[test]
fn expmv_adjoint_matches_float64_references() {
    let mut r = rng(33);
    let n = 8;
    for cfg in [
        ExpmvConfig::new(),
        ExpmvConfig::new().with_fallback(false),
        ExpmvConfig::new().with_shift(false),
    ] {
        for norm in [0.2, 2.0, 9.0, 80.0] {
            let a = [
                random_matrix(&mut r, n, norm),
                random_matrix(&mut r, n, norm / 3.0),
            ]
            .concat();
            let v = vectors(&mut r, 2, n);
            let g = vectors(&mut r, 2, n);
            let (ga, gv) = adjoint(&a, &v, &g, n, &cfg);
            let (ea, ev) = exact(&a, &v, &g, n);
            let (erra, errv) = (rel_frobenius_host(&ga, &ea), rel_frobenius_host(&gv, &ev));
            assert!(erra <= 1e-4, "{cfg:?} norm {norm}: dA {erra:.3e}");
            assert!(errv <= 1e-4, "{cfg:?} norm {norm}: dv {errv:.3e}");
        }
    }
}

#[test]
fn expmv_adjoint_is_invariant_to_the_upstream_scale() {
    let mut r = rng(34);
    let n = 8;
    let a = random_matrix(&mut r, n, 5.0);
    let v = vectors(&mut r, 1, n);
    let g = vectors(&mut r, 1, n);
    let big: Vec<f64> = g.iter().map(|x| x * 65536.0).collect();
    let (ea, _) = exact(&a, &v, &g, n);
    let cfg = ExpmvConfig::new();
    let (ga, _) = adjoint(&a, &v, &g, n, &cfg);
    let (gb, _) = adjoint(&a, &v, &big, n, &cfg);
    let gb: Vec<f64> = gb.iter().map(|x| x / 65536.0).collect();
    let (e1, e2) = (rel_frobenius_host(&ga, &ea), rel_frobenius_host(&gb, &ea));
    assert!(
        e1 <= 1e-4 && (e2 - e1).abs() <= 0.01 * e1 + 1e-9,
        "{e1:.3e} vs {e2:.3e}"
    );
}

#[test]
fn expmv_nan_and_inf_rows_are_nan_and_the_rest_untouched() {
    let mut r = rng(35);
    let n = 4;
    let good = random_matrix(&mut r, n, 1.0);
    let mut nan = good.clone();
    nan[5] = f64::NAN;
    let mut inf = good.clone();
    inf[2] = f64::INFINITY;
    let a = [good.clone(), nan, inf, good.clone()].concat();
    let v = vectors(&mut r, 4, n);
    let y = to_f64(vlgo_core::expmv(
        batch::<B>(&a, n, DType::F32),
        vec_tensor::<B>(&v, n, DType::F32),
    ));
    for k in [1, 2] {
        assert!(
            y[k * n..(k + 1) * n].iter().all(|x| x.is_nan()),
            "row {k}: {:?}",
            &y[k * n..(k + 1) * n]
        );
    }
    for k in [0, 3] {
        let want = reference(&good, &v[k * n..(k + 1) * n], n);
        assert!(rel_frobenius_host(&y[k * n..(k + 1) * n], &want) < 1e-5);
    }
}

#[test]
fn expmv_gradient_at_zero_is_the_outer_product() {
    // d/dA <g, exp(A) v> at A = 0 is g v^T (a zero-degree series would give 0).
    let n = 3;
    let v = [1.0, -2.0, 0.5];
    let g = [0.3, 0.1, -1.0];
    for shift in [true, false] {
        let (ga, gv) = adjoint(&[0.0; 9], &v, &g, n, &ExpmvConfig::new().with_shift(shift));
        for i in 0..n {
            for j in 0..n {
                assert!(
                    (ga[i * n + j] - g[i] * v[j]).abs() < 1e-6,
                    "shift {shift}: {ga:?}"
                );
            }
        }
        assert!(rel_frobenius_host(&gv, &g) < 1e-7);
    }
}

/// The backend's `expmv` kernels (CubeCL on `wgpu` / `cuda`, the cache-resident ones on the CPU
/// backends) against the tensor-op path on NdArray, forward and both adjoints: every route (the
/// Taylor loop with and without shift, early termination, the explicit exponential for large
/// norms, non-finite rows), many Taylor steps (norm 80 with the fallback off: about 27), A
/// staged in shared memory (n <= 64) and read from global memory (n = 80), and more dense
/// routes than the GPU's dense grid has cubes.
///
/// Not covered: more than 64 steps (the GPU backward's second checkpoint level). Software Vulkan
/// (llvmpipe) ends every loop of an invocation after 65 535 iterations in all, which a backward
/// of about 55 steps at n = 16 exhausts (`docs/expm.md`).
#[test]
fn the_backend_expmv_kernels_equal_the_tensor_op_path() {
    use burn::backend::{Autodiff, NdArray};
    use vlgo_core::expm::tensor_ops;
    let mut r = rng(36);
    // Per case the 1-norms cycle through `norms`; exp(A) must stay within f32's range.
    let all = [0.0, 0.05, 0.6, 1.6, 4.0, 12.0, 40.0, 250.0];
    let cases: [(usize, usize, &[f64], ExpmvConfig); 5] = [
        (2, 300, &[20.0], ExpmvConfig::new()),
        (5, 16, &all[..7], ExpmvConfig::new().with_shift(false)),
        (
            16,
            8,
            &[0.05, 4.0, 40.0, 80.0],
            ExpmvConfig::new().with_fallback(false),
        ),
        (64, 8, &all, ExpmvConfig::new()),
        (80, 3, &all, ExpmvConfig::new().with_m_max(24)),
    ];
    for (n, count, norms, cfg) in cases {
        let mut data: Vec<f64> = (0..count)
            .flat_map(|k| random_matrix(&mut r, n, norms[k % norms.len()]))
            .collect();
        if count > 4 {
            // One non-finite matrix: a NaN row and column of outputs, the rest untouched.
            data[3 * n * n + 1] = f64::NAN;
        }
        let v = vectors(&mut r, count, n);
        let g = vectors(&mut r, count, n);
        let a_ad = Tensor::<Autodiff<B>, 3>::from_inner(batch::<B>(&data, n, DType::F32));
        let v_ad = Tensor::<Autodiff<B>, 2>::from_inner(vec_tensor::<B>(&v, n, DType::F32));
        let (a_ad, v_ad) = (a_ad.require_grad(), v_ad.require_grad());
        let y = expmv_with(a_ad.clone(), v_ad.clone(), &cfg).unwrap();
        let grads = (y.clone() * Tensor::from_inner(vec_tensor::<B>(&g, n, DType::F32)))
            .sum()
            .backward();
        let (y, ga, gv) = (
            to_f64(y.inner()),
            to_f64(a_ad.grad(&grads).unwrap()),
            to_f64(v_ad.grad(&grads).unwrap()),
        );
        let (ry, rga, rgv) = tensor_ops::expmv_with_backward(
            batch::<NdArray>(&data, n, DType::F32),
            vec_tensor::<NdArray>(&v, n, DType::F32),
            vec_tensor::<NdArray>(&g, n, DType::F32),
            &cfg,
        );
        let (ry, rga, rgv) = (to_f64(ry), to_f64(rga), to_f64(rgv));
        let nn = n * n;
        for k in 0..count {
            let (row, mat) = (k * n..(k + 1) * n, k * nn..(k + 1) * nn);
            if data[mat.clone()].iter().any(|x| !x.is_finite()) {
                assert!(
                    y[row.clone()].iter().all(|x| x.is_nan()),
                    "n {n} matrix {k}"
                );
                assert!(ga[mat].iter().all(|x| x.is_nan()), "n {n} matrix {k}");
                assert!(gv[row].iter().all(|x| x.is_nan()), "n {n} matrix {k}");
                continue;
            }
            let a = &data[mat.clone()];
            let bar = 10.0 * (1.0 + two_norm(a, n)) * U32 * 4.0;
            let what = format!("{cfg:?} n {n} matrix {k} (norm {:.3})", one_norm(a, n));
            let err = rel_frobenius_host(&y[row.clone()], &ry[row.clone()]);
            assert!(err <= bar.max(1e-6), "{what}: y {err:.3e}");
            let err = rel_frobenius_host(&ga[mat.clone()], &rga[mat]);
            assert!(err <= bar.max(1e-4), "{what}: dA {err:.3e}");
            let err = rel_frobenius_host(&gv[row.clone()], &rgv[row]);
            assert!(err <= bar.max(1e-4), "{what}: dv {err:.3e}");
        }
    }
}

/// On the CubeCL backends f32 `expmv` takes the kernels (up to n = 512) and f64 the tensor ops.
#[test]
fn f32_expmv_takes_the_gpu_kernels_on_cubecl_backends() {
    use burn::tensor::Shape;
    use vlgo_core::ExpmBackend;
    let gpu = cfg!(any(feature = "test-wgpu", feature = "test-cuda"));
    for n in [1, 5, 64, 512] {
        let shape = Shape::new([3, n, n]);
        assert_eq!(
            <B as ExpmBackend>::has_expmv_kernel(DType::F32, &shape),
            gpu
        );
        assert!(!<B as ExpmBackend>::has_expmv_kernel(DType::F64, &shape));
    }
    assert!(!<B as ExpmBackend>::has_expmv_kernel(
        DType::F32,
        &Shape::new([3, 513, 513])
    ));
}
