//! Forward accuracy of the explicit exponential (`expm.md`, "Test suite" and "Accuracy bar").

use burn::prelude::*;
use burn::tensor::DType;
use serde::Deserialize;
use vlgo_core::{ExpmConfig, ExpmMethod, expm_with};

use crate::common::*;

#[derive(Deserialize)]
struct Fixtures {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    n: usize,
    a: Vec<f64>,
    expm: Vec<f64>,
}

fn fixtures() -> Vec<Case> {
    let text = include_str!("../data/expm-fixtures.json");
    serde_json::from_str::<Fixtures>(text)
        .expect("fixture file parses")
        .cases
}

fn run(a: &[f64], n: usize, dtype: DType, method: ExpmMethod) -> Vec<f64> {
    let t = expm_with(
        batch::<B>(a, n, dtype),
        &ExpmConfig::new().with_method(method),
    )
    .unwrap();
    assert_eq!(t.dtype(), dtype, "output keeps the input dtype");
    to_f64(t)
}

const METHODS: [ExpmMethod; 2] = [ExpmMethod::Pade, ExpmMethod::Taylor];

#[test]
fn every_fixture_meets_the_f32_bar() {
    let mut failures = Vec::new();
    for case in fixtures() {
        for method in METHODS {
            let got = run(&case.a, case.n, DType::F32, method);
            let err = rel_frobenius_host(&got, &case.expm);
            let bar = f32_bar(&case.a, case.n);
            if err.is_nan() || err > bar {
                failures.push(format!("{} {method:?}: {err:.3e} > {bar:.3e}", case.name));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn f64_oracle_matches_the_fixtures() {
    if !supports_f64() {
        return;
    }
    let mut failures = Vec::new();
    for case in fixtures() {
        for method in METHODS {
            let got = run(&case.a, case.n, DType::F64, method);
            let err = rel_frobenius_host(&got, &case.expm);
            // 1e-12 where the condition allows: the exponential's relative condition number
            // grows like ||A||, so the bar scales with it the same way as the f32 bar.
            let bar = 1e-12 * (1.0 + two_norm(&case.a, case.n));
            if err.is_nan() || err > bar {
                failures.push(format!("{} {method:?}: {err:.3e} > {bar:.3e}", case.name));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn closed_forms_zero_diagonal_scalar_jordan() {
    // zero -> I
    let z = run(&[0.0; 16], 4, DType::F32, ExpmMethod::Pade);
    let eye: Vec<f64> = (0..16)
        .map(|k| if k % 5 == 0 { 1.0 } else { 0.0 })
        .collect();
    assert_eq!(z, eye);
    // diagonal
    let d = [-2.0f64, 0.3, 1.5];
    let mut a = vec![0.0; 9];
    let mut e = vec![0.0; 9];
    for i in 0..3 {
        a[i * 4] = d[i];
        e[i * 4] = d[i].exp();
    }
    for method in METHODS {
        assert!(rel_frobenius_host(&run(&a, 3, DType::F32, method), &e) < f32_bar(&a, 3));
        // 1x1 is exp
        let s = run(&[-1.3], 1, DType::F32, method)[0];
        assert!((s / (-1.3f64).exp() - 1.0).abs() < 4.0 * U32, "{s}");
    }
    // nilpotent Jordan block: entries t^k / k! on the k-th superdiagonal
    let (n, t) = (6, 0.7f64);
    let mut a = vec![0.0; n * n];
    for i in 0..n - 1 {
        a[i * n + i + 1] = t;
    }
    let mut e = vec![0.0; n * n];
    for i in 0..n {
        for j in i..n {
            let k = (j - i) as i32;
            e[i * n + j] = t.powi(k) / (1..=k).map(f64::from).product::<f64>();
        }
    }
    for method in METHODS {
        assert!(rel_frobenius_host(&run(&a, n, DType::F32, method), &e) < f32_bar(&a, n));
    }
}

#[test]
fn block_rotations_up_to_frequency_400() {
    // Many squarings: frequency 400 needs s = 7 at degree 7.
    let (a, e) = rotation_blocks(&[0.05, 1.0, 3.0, 40.0, 400.0], 0.0);
    let (ad, ed) = rotation_blocks(&[0.5, 7.0], -0.3);
    for method in METHODS {
        let err = rel_frobenius_host(&run(&a, 10, DType::F32, method), &e);
        assert!(err < f32_bar(&a, 10), "{method:?}: {err:.3e}");
        let err = rel_frobenius_host(&run(&ad, 4, DType::F32, method), &ed);
        assert!(err < f32_bar(&ad, 4), "{method:?}: {err:.3e}");
    }
}

#[test]
fn initialisation_form_has_its_closed_form() {
    // c (r I + w J), J = blockdiag of [[0, -1], [1, 0]]: exp = e^{cr}(cos(cw) I + sin(cw) J).
    let (n, r, w) = (16, 3e-5f64, 2.7f64);
    for c in [0.05f64, 1.0, 5.0] {
        let mut a = vec![0.0; n * n];
        let mut e = vec![0.0; n * n];
        for k in 0..n / 2 {
            let (i, j) = (2 * k, 2 * k + 1);
            a[i * n + i] = c * r;
            a[j * n + j] = c * r;
            a[i * n + j] = -c * w;
            a[j * n + i] = c * w;
            let g = (c * r).exp();
            e[i * n + i] = g * (c * w).cos();
            e[j * n + j] = g * (c * w).cos();
            e[i * n + j] = -g * (c * w).sin();
            e[j * n + i] = g * (c * w).sin();
        }
        for method in METHODS {
            let err = rel_frobenius_host(&run(&a, n, DType::F32, method), &e);
            assert!(err < f32_bar(&a, n), "c = {c} {method:?}: {err:.3e}");
        }
    }
}

#[test]
fn conjugated_normal_matrices_whose_one_norm_exceeds_the_radius() {
    let mut g = rng(7);
    let n = 12;
    let q = random_orthogonal(&mut g, n);
    let freqs: Vec<f64> = (0..n / 2).map(|k| 0.8 * (k + 1) as f64).collect();
    let (b, eb) = rotation_blocks(&freqs, -0.1);
    let bm = nalgebra::DMatrix::from_row_slice(n, n, &b);
    let ebm = nalgebra::DMatrix::from_row_slice(n, n, &eb);
    let a = row_major(&(&q * bm * q.transpose()));
    let e = row_major(&(&q * ebm * q.transpose()));
    for method in METHODS {
        let err = rel_frobenius_host(&run(&a, n, DType::F32, method), &e);
        assert!(err < f32_bar(&a, n), "{method:?}: {err:.3e}");
    }
}

#[test]
fn group_identities_hold() {
    let mut g = rng(11);
    let n = 8;
    // Skew-symmetric A: T orthogonal, det T = e^{tr A} = 1.
    let r = random_matrix(&mut g, n, 3.0);
    let skew: Vec<f64> = (0..n * n)
        .map(|k| {
            let (i, j) = (k / n, k % n);
            r[i * n + j] - r[j * n + i]
        })
        .collect();
    let a = random_matrix(&mut g, n, 2.5);
    let neg: Vec<f64> = a.iter().map(|x| -x).collect();
    let twice: Vec<f64> = a.iter().map(|x| 2.0 * x).collect();
    // The identities are checked in f64 on the host: a backend's own f32 matmul may round
    // further (Burn's cuda matmul takes TF32 tensor cores).
    let host = |a: &[f64], method| {
        let cfg = ExpmConfig::new().with_method(method);
        let t = expm_with(batch::<B>(a, n, DType::F32), &cfg).unwrap();
        nalgebra::DMatrix::from_row_slice(n, n, &to_f64(t))
    };
    let eye = nalgebra::DMatrix::<f64>::identity(n, n);
    let close = |x: &nalgebra::DMatrix<f64>, y: &nalgebra::DMatrix<f64>| {
        rel_frobenius_host(&row_major(x), &row_major(y))
    };
    for method in METHODS {
        let t = host(&skew, method);
        let tt = t.transpose() * &t - &eye;
        assert!(tt.iter().all(|x| x.abs() < 2e-5), "{method:?}");
        let det = t.determinant();
        assert!((det - 1.0).abs() < 1e-5, "{method:?}: det {det}");

        let ea = host(&a, method);
        assert!(
            close(&(&ea * host(&neg, method)), &eye) < 1e-5,
            "{method:?}"
        );
        assert!(
            close(&(&ea * &ea), &host(&twice, method)) < 1e-5,
            "{method:?}"
        );
    }
}

#[test]
fn every_degree_branch_runs_and_a_mixed_batch_equals_the_loop() {
    let mut g = rng(3);
    let n = 6;
    // Norms between consecutive thetas of both methods and precisions, plus scaled ones.
    let norms = [
        1e-8, 1e-5, 0.01, 0.04, 0.2, 0.4, 0.5, 0.9, 1.4, 1.9, 2.5, 3.0, 3.9, 5.0, 12.0, 60.0,
    ];
    let mats: Vec<Vec<f64>> = norms.iter().map(|&s| random_matrix(&mut g, n, s)).collect();
    let all: Vec<f64> = mats.concat();
    for method in METHODS {
        let cfg = ExpmConfig::new().with_method(method);
        let together = to_f64(expm_with(batch::<B>(&all, n, DType::F32), &cfg).unwrap());
        for (k, a) in mats.iter().enumerate() {
            let alone = to_f64(expm_with(batch::<B>(a, n, DType::F32), &cfg).unwrap());
            let part = &together[k * n * n..(k + 1) * n * n];
            assert!(
                rel_frobenius_host(part, &alone) < 1e-6,
                "{method:?} norm {}",
                norms[k]
            );
            let err = rel_frobenius_host(part, &reference_expm(a, n));
            assert!(
                err < f32_bar(a, n),
                "{method:?} norm {}: {err:.3e}",
                norms[k]
            );
        }
    }
}

#[test]
fn nan_and_inf_give_non_finite_output_and_leave_the_batch_alone() {
    let n = 3;
    let good = [0.1, 0.2, 0.0, -0.3, 0.0, 0.5, 0.0, 0.1, 0.2];
    let mut nan = good;
    nan[4] = f64::NAN;
    let mut inf = good;
    inf[1] = f64::INFINITY;
    let mut ninf = good;
    ninf[0] = f64::NEG_INFINITY;
    let data = [good, nan, inf, ninf, good].concat();
    for method in METHODS {
        let out = run(&data, n, DType::F32, method);
        let ok = reference_expm(&good, n);
        for k in [0, 4] {
            assert!(rel_frobenius_host(&out[k * 9..(k + 1) * 9], &ok) < 1e-6);
        }
        for k in 1..4 {
            assert!(
                out[k * 9..(k + 1) * 9].iter().any(|x| !x.is_finite()),
                "matrix {k} {method:?}"
            );
        }
    }
}

#[test]
fn half_precision_inputs_compute_in_f32_and_round_once() {
    let device = device();
    let mut g = rng(5);
    let n = 8;
    for (dtype, u_out) in [(DType::F16, 2f64.powi(-11)), (DType::BF16, 2f64.powi(-8))] {
        if !<B as Backend>::supports_dtype(&device, dtype) {
            eprintln!("{dtype:?} is not a dtype of this backend: skipped");
            continue; // NdArray has no half types; Flex has both, lavapipe f16 only.
        }
        for norm in [0.5, 6.0] {
            let a = random_matrix(&mut g, n, norm);
            let t = batch::<B>(&a, n, DType::F32).cast(dtype);
            let rounded = to_f64(t.clone());
            let out = vlgo_core::expm(t);
            assert_eq!(out.dtype(), dtype);
            let err = rel_frobenius_host(&to_f64(out), &reference_expm(&rounded, n));
            assert!(err <= 2.0 * u_out, "{dtype:?} norm {norm}: {err:.3e}");
            eprintln!(
                "{dtype:?} input, norm {norm}: error {err:.2e} (bar {:.2e})",
                2.0 * u_out
            );
        }
    }
}

#[test]
fn rank_generic_form_matches_the_batched_one() {
    let mut g = rng(9);
    let a = [random_matrix(&mut g, 4, 1.0), random_matrix(&mut g, 4, 2.0)].concat();
    let flat = batch::<B>(&a, 4, DType::F32);
    let nd = vlgo_core::try_expm_nd(flat.clone().reshape([1, 2, 4, 4])).unwrap();
    assert_eq!(nd.dims(), [1, 2, 4, 4]);
    assert_eq!(to_f64(nd), to_f64(vlgo_core::expm(flat)));
}

/// The backend's own kernel (CubeCL on `wgpu` / `cuda`, the cache-resident one on the CPU
/// backends) against the portable tensor-op path, forward and adjoint: sizes that do and do not
/// fill the GPU kernels' 4 x 4 tiles (on CUDA, n = 4 and 12 take the wide products' single and
/// odd last blocks of four k), every degree branch and several squarings, and a batch of
/// tiny matrices larger than the GPU kernels' grid, so cubes walk over several matrices. The
/// adjoint of Taylor takes the checkpointing forward and the backward from its checkpoint on the
/// GPU backends, Padé's the recomputing backward. A kernel that failed to compile would give
/// garbage here. The tensor-op path runs on NdArray: on an
/// H100, Burn's `cuda` matmul rounds f32 products to TF32 (about 1e-4 relative), which would make
/// the reference the less accurate side.
#[test]
fn the_backend_kernel_equals_the_tensor_op_path() {
    use burn::backend::{Autodiff, NdArray};
    use vlgo_core::expm::tensor_ops;
    let mut g = rng(17);
    let norms = [0.01, 0.3, 1.0, 1.7, 2.5, 3.5, 9.0, 30.0];
    for (n, count) in [(2, 1100), (4, 8), (5, 8), (12, 8), (64, 4)] {
        let data: Vec<f64> = (0..count)
            .flat_map(|k| random_matrix(&mut g, n, norms[k % norms.len()]))
            .collect();
        let upstream: Vec<f64> = (0..count * n * n).map(|_| gaussian(&mut g)).collect();
        let a = batch::<B>(&data, n, DType::F32);
        let up = batch::<B>(&upstream, n, DType::F32);
        let host_a = batch::<NdArray>(&data, n, DType::F32);
        let host_up = batch::<NdArray>(&upstream, n, DType::F32);
        for method in METHODS {
            let cfg = ExpmConfig::new().with_method(method);
            let kernel = to_f64(expm_with(a.clone(), &cfg).unwrap());
            let reference = to_f64(tensor_ops::expm(host_a.clone(), method));
            let ad = Tensor::<Autodiff<B>, 3>::from_inner(a.clone()).require_grad();
            // A tracked input takes the checkpointing forward where the backend has one (the
            // GPU kernels with Taylor): its exponential is the plain forward's.
            let tracked = expm_with(ad.clone(), &cfg).unwrap();
            let tracked_value = to_f64(tracked.clone().inner());
            let grads = (tracked * Tensor::from_inner(up.clone())).sum().backward();
            let kernel_grad = to_f64(ad.grad(&grads).unwrap());
            let reference_grad = to_f64(tensor_ops::expm_backward(
                host_a.clone(),
                host_up.clone(),
                method,
            ));
            let nn = n * n;
            for k in 0..count {
                let part = k * nn..(k + 1) * nn;
                let mat = &data[part.clone()];
                let err = rel_frobenius_host(&kernel[part.clone()], &reference[part.clone()]);
                assert!(
                    err < 2.0 * f32_bar(mat, n),
                    "{method:?} n {n} matrix {k} (norm {}): forward {err:.3e}",
                    one_norm(mat, n)
                );
                let err = rel_frobenius_host(&tracked_value[part.clone()], &kernel[part.clone()]);
                assert!(
                    err < 1e-6,
                    "{method:?} n {n} matrix {k}: tracked forward {err:.3e}"
                );
                let err = rel_frobenius_host(&kernel_grad[part.clone()], &reference_grad[part]);
                assert!(
                    err < 1e-4,
                    "{method:?} n {n} matrix {k} (norm {}): adjoint {err:.3e}",
                    one_norm(mat, n)
                );
            }
        }
    }
}

/// On the CubeCL backends f32 exponentials take the kernels and f64 the tensor ops: a routing
/// regression would leave the reference test above comparing the tensor-op path with itself.
#[test]
fn f32_exponentials_take_the_gpu_kernels_on_cubecl_backends() {
    use burn::tensor::Shape;
    use vlgo_core::ExpmBackend;
    let gpu = cfg!(any(feature = "test-wgpu", feature = "test-cuda"));
    for n in [1, 5, 64] {
        let shape = Shape::new([3, n, n]);
        assert_eq!(<B as ExpmBackend>::has_expm_kernel(DType::F32, &shape), gpu);
        assert!(!<B as ExpmBackend>::has_expm_kernel(DType::F64, &shape));
    }
    assert!(!<B as ExpmBackend>::has_expm_kernel(
        DType::F32,
        &Shape::new([3, 4, 5])
    ));
    // Autodiff's Taylor forward keeps a checkpoint for the backward there (unless switched off
    // for the process); Padé and f64 do not.
    let device = Default::default();
    let shape = Shape::new([3, 64, 64]);
    let floats =
        |dtype, method| <B as ExpmBackend>::expm_checkpoint_floats(&device, dtype, &shape, method);
    let on = gpu && !checkpoint_switched_off();
    assert_eq!(
        floats(DType::F32, ExpmMethod::Taylor),
        on.then_some(3 * (4 + 7 * 64 * 64))
    );
    assert_eq!(floats(DType::F32, ExpmMethod::Pade), None);
    assert_eq!(floats(DType::F64, ExpmMethod::Taylor), None);
}

/// The checkpointed pair that autodiff runs for Taylor, called directly: on the GPU backends the
/// forward keeps a checkpoint of the documented size that starts with the host's plans, its
/// exponential is the plain forward's, and the backward from it equals the recomputing backward
/// (a NaN matrix gives a NaN adjoint and leaves its neighbours alone); elsewhere no checkpoint
/// is kept.
#[test]
fn the_backward_from_a_checkpoint_equals_the_recomputing_backward() {
    use burn::tensor::TensorPrimitive;
    use vlgo_core::ExpmBackend;
    let float = |t: Tensor<B, 3>| t.into_primitive().tensor();
    let wrap = |p| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(p));
    let mut g = rng(29);
    let n = 12;
    let norms = [0.3, 1.7, 3.5, f64::NAN, 9.0, 30.0];
    let data: Vec<f64> = norms
        .iter()
        .flat_map(|&norm| {
            if norm.is_nan() {
                vec![f64::NAN; n * n]
            } else {
                random_matrix(&mut g, n, norm)
            }
        })
        .collect();
    let upstream: Vec<f64> = (0..data.len()).map(|_| gaussian(&mut g)).collect();
    let a = batch::<B>(&data, n, DType::F32);
    let up = batch::<B>(&upstream, n, DType::F32);
    let (out, checkpoint) = B::expm_checkpointed(float(a.clone()), ExpmMethod::Taylor);
    let plain = to_f64(
        expm_with(
            a.clone(),
            &ExpmConfig::new().with_method(ExpmMethod::Taylor),
        )
        .unwrap(),
    );
    let out = to_f64(wrap(out));
    let nn = n * n;
    for (k, norm) in norms.iter().enumerate() {
        let part = k * nn..(k + 1) * nn;
        if norm.is_nan() {
            assert!(out[part].iter().all(|v| v.is_nan()), "matrix {k}");
        } else {
            let err = rel_frobenius_host(&out[part.clone()], &plain[part]);
            assert!(err < 1e-6, "matrix {k}: forward {err:.3e}");
        }
    }
    let gpu = cfg!(any(feature = "test-wgpu", feature = "test-cuda"));
    assert_eq!(checkpoint.is_some(), gpu && !checkpoint_switched_off());
    let Some(checkpoint) = checkpoint else {
        return;
    };
    let kept: Tensor<B, 1> = Tensor::from_primitive(TensorPrimitive::Float(checkpoint.clone()));
    assert_eq!(kept.dims(), [norms.len() * (4 + 7 * nn)]);
    // The checkpoint starts with the plans the kernel made on the device: per matrix 2^-s, s,
    // degree, finiteness, as the host picks them from the 1-norm (the norms lie away from the
    // degree table's thresholds) and NaN for the NaN matrix.
    let plans = to_f64(kept.slice(0..norms.len() * 4));
    for (k, plan) in plans.chunks(4).enumerate() {
        let column_sums = (0..n).map(|j| (0..n).map(|i| data[k * nn + i * n + j].abs()).sum());
        // NaN where a column sum is (`f64::max` alone would drop it).
        let norm = column_sums.fold(0f64, |m, s: f64| {
            if m.is_nan() || s.is_nan() {
                f64::NAN
            } else {
                m.max(s)
            }
        });
        let (degree, s) = vlgo_core::testing::f32_expm_plan(norm, ExpmMethod::Taylor);
        if norms[k].is_nan() {
            assert!(plan[0].is_nan() && plan[3] == 0.0, "matrix {k}: {plan:?}");
        } else {
            assert_eq!(plan[0], 0.5f64.powi(s as i32), "matrix {k}: scale");
            assert_eq!(plan[3], 1.0, "matrix {k}: finite");
        }
        assert_eq!((plan[2], plan[1]), (degree as f64, s as f64), "matrix {k}");
    }
    let from_checkpoint = to_f64(wrap(B::expm_backward_checkpointed(
        float(a.clone()),
        float(up.clone()),
        ExpmMethod::Taylor,
        Some(checkpoint),
    )));
    let recomputed = to_f64(wrap(B::expm_backward(
        float(a),
        float(up),
        ExpmMethod::Taylor,
    )));
    for (k, norm) in norms.iter().enumerate() {
        let part = k * nn..(k + 1) * nn;
        if norm.is_nan() {
            assert!(
                from_checkpoint[part].iter().all(|v| v.is_nan()),
                "matrix {k}"
            );
        } else {
            let err = rel_frobenius_host(&from_checkpoint[part.clone()], &recomputed[part]);
            // 2.6e-7 at most on software Vulkan: the two differ in their plan (the norm of A or
            // of A^T) and in rounding.
            assert!(err < 5e-6, "matrix {k} (norm {norm}): adjoint {err:.3e}");
        }
    }
}

/// Whether this process switched the GPU backward's checkpoint off by its environment variable
/// (read as the library reads it).
fn checkpoint_switched_off() -> bool {
    #[cfg(any(feature = "test-wgpu", feature = "test-cuda"))]
    return std::env::var(vlgo_core::gpu::CHECKPOINT_VAR)
        .is_ok_and(|v| v.trim().parse::<usize>() == Ok(0));
    #[cfg(not(any(feature = "test-wgpu", feature = "test-cuda")))]
    false
}
