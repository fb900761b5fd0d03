//! Exponential times vector: agreement with expm(A) v, the fallback, and its adjoint.

use burn::prelude::*;
use burn::tensor::DType;
use vlgo_core::{ExpmvConfig, expmv_with};

use crate::common::*;

fn vectors(r: &mut vlgo_core::StreamRng, count: usize, n: usize) -> Vec<f64> {
    (0..count * n).map(|_| gaussian(r)).collect()
}

fn vec_tensor<BK: Backend>(data: &[f64], n: usize, dtype: DType) -> Tensor<BK, 2> {
    Tensor::<BK, 1>::from_data(
        TensorData::new(data.to_vec(), [data.len()]),
        (&Default::default(), dtype),
    )
    .reshape([data.len() / n, n])
}

fn frobenius(x: &[f64]) -> f64 {
    x.iter().map(|e| e * e).sum::<f64>().sqrt()
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
/// backends) against the tensor-op path on NdArray in f64, forward and both adjoints: every route (the
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
        // The oracle: the tensor-op path in f64 on the same (f32-rounded) inputs, to f64's
        // tolerance. (Against the f32 tensor-op path the two roundings would add up.)
        let round = |x: &[f64]| -> Vec<f64> { x.iter().map(|&e| e as f32 as f64).collect() };
        let (ry, rga, rgv) = tensor_ops::expmv_with_backward(
            batch::<NdArray>(&round(&data), n, DType::F64),
            vec_tensor::<NdArray>(&round(&v), n, DType::F64),
            vec_tensor::<NdArray>(&round(&g), n, DType::F64),
            &cfg.with_tol(f64::EPSILON / 2.0),
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

/// `expmv_generated` equals exp(A) v of the generators A_p = sum_m c[r, m] psi[m, k], formed on
/// the host in f64: on the GPU backends (untracked) inside the kernel, with sparse coefficients,
/// an all-zero row (A = 0), a NaN coefficient (NaN rows for all the row's blocks), mixed norms,
/// n up to 64, more problems than the grid, and n = 80 (past the kernel: formed by a matmul).
/// Tracked, it records the matmul and `expmv`: the same values, and a gradient reaches c.
#[test]
fn expmv_generated_equals_expmv_of_the_formed_generators() {
    use rand::Rng;
    use vlgo_core::expmv_generated;
    let mut r = rng(38);
    let round = |x: f64| x as f32 as f64;
    // (n, blocks S, generators M, rows R)
    for (n, s, m, rows) in [
        (2, 3, 5, 40),
        (5, 2, 7, 12),
        (16, 1, 40, 8),
        (64, 2, 3, 5),
        // More problems than the kernel's grid (65 535 cubes): cubes walk over several. The
        // tracked path's `expmv` takes many dense routes here; its interpreter's grid once
        // left each cube about 260 of them, past software Vulkan's loop budget (docs/expm.md).
        (2, 2, 1, 33_000),
        (80, 1, 2, 3),
    ] {
        let psi: Vec<f64> = (0..m * s * n * n)
            .map(|_| round(gaussian(&mut r) / n as f64))
            .collect();
        // Coefficient scales per row; the draws are clamped to 2.5 sigma so that exp(A) stays
        // within f32's range.
        let norms = [0.05, 0.6, 4.0, 12.0, 20.0];
        let mut c: Vec<f64> = (0..rows * m)
            .map(|i| {
                let keep = r.random::<f64>() < 0.5 || m == 1;
                let scale = norms[(i / m) % norms.len()] / (m as f64).sqrt();
                if keep {
                    round(gaussian(&mut r).clamp(-2.5, 2.5) * scale)
                } else {
                    0.0
                }
            })
            .collect();
        c[m..2 * m].iter_mut().for_each(|x| *x = 0.0);
        let nan_row = rows - 1;
        c[nan_row * m] = f64::NAN;
        let v: Vec<f64> = vectors(&mut r, rows * s, n)
            .into_iter()
            .map(round)
            .collect();
        let tensor = |data: &[f64]| {
            Tensor::<B, 1>::from_data(
                TensorData::new(data.to_vec(), [data.len()]),
                (&device(), DType::F32),
            )
        };
        let ct: Tensor<B, 2> = tensor(&c).reshape([rows, m]);
        let vt: Tensor<B, 2> = tensor(&v).reshape([rows * s, n]);
        let psit: Tensor<B, 4> = tensor(&psi).reshape([m, s, n, n]);
        let y = to_f64(
            expmv_generated(ct.clone(), psit.clone(), vt.clone(), &ExpmvConfig::new()).unwrap(),
        );
        // Tracked: the recorded ops give the same values and a gradient to c.
        let c_ad = Tensor::<AD, 2>::from_inner(ct).require_grad();
        let y_ad = expmv_generated(
            c_ad.clone(),
            Tensor::from_inner(psit),
            Tensor::from_inner(vt),
            &ExpmvConfig::new(),
        )
        .unwrap();
        let grads = y_ad.clone().sum().backward();
        let gc = to_f64(c_ad.grad(&grads).expect("c is tracked"));
        let y_ad = to_f64(y_ad.inner());
        assert!(
            gc[..m].iter().all(|x| x.is_finite()),
            "n {n}: gradient to c"
        );
        for row in 0..rows {
            for k in 0..s {
                let p = row * s + k;
                let out = p * n..(p + 1) * n;
                if row == nan_row {
                    assert!(
                        y[out.clone()].iter().all(|x| x.is_nan()),
                        "n {n} problem {p}"
                    );
                    assert!(y_ad[out].iter().all(|x| x.is_nan()), "n {n} problem {p}");
                    continue;
                }
                let a: Vec<f64> = (0..n * n)
                    .map(|e| {
                        (0..m)
                            .map(|j| c[row * m + j] * psi[(j * s + k) * n * n + e])
                            .sum()
                    })
                    .collect();
                let want = reference(&a, &v[out.clone()], n);
                // Normwise, relative to ||exp(A)|| ||v||: with a large norm exp(A) v can cancel
                // far below that (a v along a decaying direction), and no f32 method resolves
                // the small result to its own size.
                let size = frobenius(&reference_expm(&a, n)) * frobenius(&v[out.clone()]);
                let bar = (10.0 * (1.0 + two_norm(&a, n)) * U32 * 4.0).max(1e-6);
                let what = format!("n {n} problem {p} (norm {:.3})", one_norm(&a, n));
                for (path, got) in [("fused", &y), ("tracked", &y_ad)] {
                    let diff: Vec<f64> = got[out.clone()]
                        .iter()
                        .zip(&want)
                        .map(|(x, w)| x - w)
                        .collect();
                    let err = frobenius(&diff) / size.max(f64::MIN_POSITIVE);
                    assert!(err <= bar, "{what}: {path} {err:.3e} > {bar:.3e}");
                }
                if row == 1 {
                    assert_eq!(y[out.clone()], v[out], "n {n}: A = 0 moves nothing");
                }
            }
        }
    }
}

/// With a gradient to take, `expmv_generated` gives the adjoints of c, psi and v that autodiff
/// takes through the formed generators' matmul and `expmv` (one node of its own on the CPU
/// backends, where each generator is formed again in the backward): the small-matrix path, the
/// n = 64 kernels, a zero row, and more rows than one group (8) with a partial last group.
#[test]
fn expmv_generated_adjoints_equal_those_of_the_formed_generators() {
    use vlgo_core::expmv_generated;
    let mut r = rng(40);
    for (n, s, m, rows) in [(3, 2, 5, 7), (64, 2, 4, 5), (5, 3, 7, 19)] {
        let draw = |r: &mut vlgo_core::StreamRng, len: usize, scale: f64| -> Vec<f64> {
            (0..len).map(|_| gaussian(r) * scale).collect()
        };
        let psi = draw(&mut r, m * s * n * n, 1.0 / n as f64);
        let mut c = draw(&mut r, rows * m, 0.3);
        c[m..2 * m].iter_mut().for_each(|x| *x = 0.0);
        let v = draw(&mut r, rows * s * n, 1.0);
        let w = draw(&mut r, rows * s * n, 1.0);
        let tensor = |data: &[f64]| {
            Tensor::<AD, 1>::from_data(TensorData::new(data.to_vec(), [data.len()]), &device())
        };
        let leaves = || {
            let c: Tensor<AD, 2> = tensor(&c).reshape([rows, m]).require_grad();
            let psi: Tensor<AD, 4> = tensor(&psi).reshape([m, s, n, n]).require_grad();
            let v: Tensor<AD, 2> = tensor(&v).reshape([rows * s, n]).require_grad();
            (c, psi, v)
        };
        let weights: Tensor<AD, 2> = tensor(&w).reshape([rows * s, n]);
        let adjoints =
            |y: Tensor<AD, 2>, (c, psi, v): &(Tensor<AD, 2>, Tensor<AD, 4>, Tensor<AD, 2>)| {
                let grads = (y.clone() * weights.clone()).sum().backward();
                let grad = |g: Option<Tensor<B, 1>>| to_f64(g.expect("tracked"));
                (
                    to_f64(y.inner()),
                    [
                        grad(c.grad(&grads).map(|g| g.flatten(0, 1))),
                        grad(psi.grad(&grads).map(|g| g.flatten(0, 3))),
                        grad(v.grad(&grads).map(|g| g.flatten(0, 1))),
                    ],
                )
            };
        let fused = leaves();
        let y = expmv_generated(
            fused.0.clone(),
            fused.1.clone(),
            fused.2.clone(),
            &ExpmvConfig::new(),
        )
        .unwrap();
        let (y, got) = adjoints(y, &fused);
        let formed = leaves();
        let a = formed
            .0
            .clone()
            .matmul(formed.1.clone().reshape([m, s * n * n]))
            .reshape([rows * s, n, n]);
        let y_formed = expmv_with(a, formed.2.clone(), &ExpmvConfig::new()).unwrap();
        let (y_formed, want) = adjoints(y_formed, &formed);
        assert!(rel_frobenius_host(&y, &y_formed) < 1e-5, "n {n}: values");
        for (what, (g, e)) in ["c", "psi", "v"].iter().zip(got.iter().zip(&want)) {
            let err = rel_frobenius_host(g, e);
            assert!(err < 1e-5, "n {n}: adjoint of {what} off by {err:.3e}");
        }
    }
}

/// Half-precision coefficients, dictionary and vectors compute in f32 and come back in their
/// dtype, rounded once (on backends with the dtype: lavapipe has f16, NdArray neither).
#[test]
fn expmv_generated_takes_half_precision() {
    use vlgo_core::expmv_generated;
    let mut r = rng(39);
    let (n, s, m, rows) = (8, 2, 6, 5);
    for (dtype, u_out) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        if !<B as Backend>::supports_dtype(&device(), dtype) {
            eprintln!("{dtype:?} is not a dtype of this backend: skipped");
            continue;
        }
        let half = |data: &[f64]| {
            Tensor::<B, 1>::from_data(
                TensorData::new(data.to_vec(), [data.len()]),
                (&device(), DType::F32),
            )
            .cast(dtype)
        };
        let psi: Vec<f64> = (0..m * s * n * n)
            .map(|_| gaussian(&mut r) / n as f64)
            .collect();
        let c: Vec<f64> = (0..rows * m).map(|_| 0.4 * gaussian(&mut r)).collect();
        let v = vectors(&mut r, rows * s, n);
        let (ct, psit, vt) = (half(&c), half(&psi), half(&v));
        // The reference takes the inputs as rounded to the half type.
        let (c, psi, v) = (to_f64(ct.clone()), to_f64(psit.clone()), to_f64(vt.clone()));
        let y = expmv_generated(
            ct.reshape([rows, m]),
            psit.reshape([m, s, n, n]),
            vt.reshape([rows * s, n]),
            &ExpmvConfig::new(),
        )
        .unwrap();
        assert_eq!(y.dtype(), dtype);
        let y = to_f64(y);
        for p in 0..rows * s {
            let (row, k) = (p / s, p % s);
            let a: Vec<f64> = (0..n * n)
                .map(|e| {
                    (0..m)
                        .map(|j| c[row * m + j] * psi[(j * s + k) * n * n + e])
                        .sum()
                })
                .collect();
            let out = p * n..(p + 1) * n;
            let err = rel_frobenius_host(&y[out.clone()], &reference(&a, &v[out], n));
            let bar = 2.0 * u_out * (1.0 + two_norm(&a, n));
            assert!(err <= bar, "{dtype:?} problem {p}: {err:.3e} > {bar:.3e}");
        }
    }
}

/// The routing of `expmv_generated`: untracked f32 on the GPU backends forms the generators in
/// the kernel, which skips zero coefficients, so a NaN generator with coefficient 0 leaves the
/// result finite there; the matmul of every other path (and of a tracked input) gives NaN.
#[test]
fn untracked_expmv_generated_forms_the_generators_in_the_gpu_kernel() {
    use vlgo_core::expmv_generated;
    let n = 4;
    let mut psi = vec![0.0; 2 * n * n];
    psi[0] = f64::NAN;
    let psi = Tensor::<B, 1>::from_floats(
        &psi.iter().map(|&x| x as f32).collect::<Vec<_>>()[..],
        &device(),
    )
    .reshape([2, 1, n, n]);
    let c = Tensor::<B, 2>::from_floats([[0.0, 1.0]], &device());
    let v = Tensor::<B, 2>::ones([1, n], &device());
    let gpu = cfg!(any(feature = "test-wgpu", feature = "test-cuda"));
    let y =
        to_f64(expmv_generated(c.clone(), psi.clone(), v.clone(), &ExpmvConfig::new()).unwrap());
    assert_eq!(y.iter().all(|x| x.is_finite()), gpu, "untracked: {y:?}");
    let tracked = expmv_generated(
        Tensor::<AD, 2>::from_inner(c).require_grad(),
        Tensor::from_inner(psi),
        Tensor::from_inner(v),
        &ExpmvConfig::new(),
    )
    .unwrap();
    assert!(
        to_f64(tracked.inner()).iter().all(|x| x.is_nan()),
        "tracked"
    );
}
