//! Exponential times vector, y_i = exp(A_i) v_i, without forming exp(A_i) (Al-Mohy and Higham
//! 2011, truncated Taylor with shift and early termination), and its checkpointed adjoint.
//!
//! Matrices whose norm makes the Taylor loop dearer than forming T fall back, per matrix, to the
//! explicit exponential followed by a product. f64 inputs always take that path: their degree
//! table would need m up to 55, which this f32-tuned loop does not carry, and the f64 explicit
//! exponential is the accurate oracle anyway.

// Burn's `slice` takes an array of ranges; a one-range array slices the batch dimension.
#![allow(clippy::single_range_in_vec_init)]

use burn::prelude::*;

use super::ExpmvConfig;
use super::dense::{self, per_matrix, reorder};
use super::plan::{ExpmPlan, Precision, choose};

/// theta_m of the truncated Taylor series in f32 (u = 2^-24) for m = 1..=24: the largest x with
/// sum_k |c_k| x^(k-1) <= u where log(e^-x T_m(x)) = sum_k c_k x^k. Computed from that definition
/// in 50-digit arithmetic; the values for m = 1..6, 8, 10, 12, 15, 18, 20, 24 agree with the design
/// note's table to all printed digits.
pub(crate) const TAYLOR_THETA_F32: [f64; 24] = [
    1.192092800768788e-7,
    5.978858893805233e-4,
    1.123386473528671e-2,
    5.116619363445086e-2,
    1.30848716459947e-1,
    2.495289322846698e-1,
    4.014582423510481e-1,
    5.800524627688768e-1,
    7.795113374358031e-1,
    9.951840790004457e-1,
    1.223479542424143,
    1.461661507209034,
    1.707648529608701,
    1.959850585959898,
    2.21704439497472,
    2.478280877521971,
    2.74281711269878,
    3.010066362817634,
    3.279561212635997,
    3.550926214706495,
    3.823857425450966,
    4.098106972191506,
    4.373471311840501,
    4.649782224100757,
];

/// Taylor degree m and number of steps s for a (shifted) 1-norm: the pair that minimises the
/// number of matrix-vector products m * ceil(norm / theta_m), smallest m on ties. `None` when the
/// norm is not finite or would need an absurd number of steps.
#[inline]
pub(crate) fn taylor_steps(norm: f64, m_max: usize) -> Option<(usize, u64)> {
    if !norm.is_finite() {
        return None;
    }
    if norm == 0.0 {
        // Degree 1, not 0: the forward would be exact with no term, but its derivative would be
        // zero instead of ybar v^T.
        return Some((1, 1));
    }
    // Costs in f64 (exact for integers below 2^53; q > 1e9 is skipped). This runs once per
    // matrix and call in the CPU kernel, where it rivals a 3 x 3 exponential, so the costs are
    // computed independently of one another (no early exit, no integer conversion: the loop
    // vectorises) and the minimum is taken afterwards; the answer is the same as stopping once
    // m alone exceeds the best cost, since every later cost is at least m.
    const ROUND: f64 = 4_503_599_627_370_496.0; // 2^52: q + 2^52 - 2^52 is q rounded to an integer
    let m_max = m_max.min(INV_THETA_F32.len());
    let mut costs = [f64::INFINITY; 24];
    for (k, (cost, inv_theta)) in costs.iter_mut().zip(&INV_THETA_F32).take(m_max).enumerate() {
        let q = norm * inv_theta;
        // Both sides are computed and then selected: a branch on q here mispredicts.
        let qc = q.min(1e15);
        let r = (qc + ROUND) - ROUND;
        let s = (r + f64::from(u8::from(r < qc))).max(1.0);
        let finite = (k + 1) as f64 * s;
        *cost = if q > 1e9 { f64::INFINITY } else { finite };
    }
    let mut best = (0usize, f64::INFINITY);
    for (k, &cost) in costs[..m_max].iter().enumerate() {
        let better = cost < best.1;
        best = (if better { k + 1 } else { best.0 }, best.1.min(cost));
    }
    (best.0 > 0).then(|| (best.0, (best.1 / best.0 as f64) as u64))
}

/// 1 / theta_m, so the search multiplies instead of dividing.
pub(crate) const INV_THETA_F32: [f64; 24] = {
    let mut inv = [0.0; 24];
    let mut i = 0;
    while i < 24 {
        inv[i] = 1.0 / TAYLOR_THETA_F32[i];
        i += 1;
    }
    inv
};

/// Per-matrix choices for a batch. Sorted order: Taylor matrices by steps descending, then the
/// fallback matrices.
#[derive(Debug, Clone, Default)]
pub struct ExpmvPlan {
    pub(crate) order: Vec<usize>,
    pub(crate) n_taylor: usize,
    /// Taylor degree per sorted Taylor matrix.
    pub(crate) degrees: Vec<usize>,
    /// Number of outer steps per sorted Taylor matrix (non-increasing).
    pub(crate) steps: Vec<u64>,
    /// Plan of the explicit exponential for the fallback matrices (in their sorted order).
    pub(crate) fallback: Option<ExpmPlan>,
    /// Original indices of matrices holding NaN or Inf: their outputs are set to NaN.
    pub(crate) non_finite: Vec<usize>,
}

impl ExpmvPlan {
    fn active_at(&self, k: u64) -> usize {
        self.steps.iter().take_while(|&&s| s > k).count()
    }
    fn max_steps(&self) -> u64 {
        self.steps.first().copied().unwrap_or(0)
    }
}

/// What the CPU kernel's forward decided for one matrix, so its backward need not decide again:
/// the Taylor degree, steps and shift, and for a single step the number of terms it used.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct KernelRecord {
    /// 0: Taylor, 1: dense fallback, 2: non-finite input.
    pub kind: u8,
    pub m: u32,
    pub s: u64,
    pub mu: f32,
    /// Terms of the single step (0 when s > 1 or unknown).
    pub used: u32,
}

/// What the backward of the Taylor part needs: the input vector of every outer step and the number
/// of terms each matrix used in it.
#[derive(Debug, Clone)]
pub struct ExpmvCheckpoints<B: Backend> {
    /// The options of the forward.
    pub(crate) config: ExpmvConfig,
    /// Whether a CPU kernel computed the forward (its backward recomputes the checkpoints per
    /// matrix, and the fields below are empty).
    pub(crate) kernel: bool,
    /// Per matrix, what the CPU kernel's forward chose (empty off the kernel).
    pub(crate) records: Vec<KernelRecord>,
    /// Per matrix, what the GPU kernels' forward chose, on the device ([N, 4]: kind, m, s, mu);
    /// the GPU backward reads it. `None` off those kernels.
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    pub(crate) routes: Option<Tensor<B, 2>>,
    pub(crate) plan: ExpmvPlan,
    /// Shifted and scaled matrices A'/s of the Taylor part, sorted.
    pub(crate) scaled: Option<Tensor<B, 3>>,
    /// e^(mu/s) per sorted Taylor matrix, [T, 1, 1].
    pub(crate) eta: Option<Tensor<B, 3>>,
    /// 1/s per sorted Taylor matrix, [T, 1, 1].
    pub(crate) inv_steps: Option<Tensor<B, 3>>,
    /// Input of outer step k, [active_k, n, 1].
    pub(crate) inputs: Vec<Tensor<B, 3>>,
    /// Terms used in outer step k per matrix, [active_k, 1, 1], and their maximum.
    pub(crate) used: Vec<(Tensor<B, 3>, usize)>,
    /// exp(A) of the fallback matrices.
    pub(crate) fallback_exp: Option<Tensor<B, 3>>,
}

impl<B: Backend> ExpmvCheckpoints<B> {
    /// Checkpoints of a GPU kernel forward: the options and the device's routes.
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    pub(crate) fn for_device(config: ExpmvConfig, routes: Tensor<B, 2>) -> Self {
        Self {
            kernel: false,
            routes: Some(routes),
            ..Self::empty(config)
        }
    }

    /// Checkpoints of a kernel forward: only the options, the kernel recomputes the rest.
    pub(crate) fn for_kernel(config: ExpmvConfig, records: Vec<KernelRecord>) -> Self {
        Self {
            kernel: true,
            records,
            ..Self::empty(config)
        }
    }

    /// The options and nothing else.
    fn empty(config: ExpmvConfig) -> Self {
        Self {
            config,
            kernel: false,
            records: Vec::new(),
            routes: None,
            plan: ExpmvPlan::default(),
            scaled: None,
            eta: None,
            inv_steps: None,
            inputs: Vec::new(),
            used: Vec::new(),
            fallback_exp: None,
        }
    }
}

fn inf_norm<B: Backend>(w: Tensor<B, 3>) -> Tensor<B, 3> {
    w.abs().max_dim(1)
}

/// Plans the batch and computes y = exp(A) v, keeping the checkpoints of the adjoint.
pub(crate) fn expmv_forward<B: Backend>(
    a: Tensor<B, 3>,
    v: Tensor<B, 2>,
    config: &ExpmvConfig,
) -> (Tensor<B, 2>, ExpmvCheckpoints<B>) {
    let [batch, n, _] = a.dims();
    let device = a.device();
    let precision = dense::precision_of(&a);

    // One read-back for the whole batch: shift, shifted norm and raw norm per matrix.
    let eye = super::scheme::eye_as(n, &a);
    let mu = if config.shift {
        (a.clone() * eye.clone()).sum_dim(2).sum_dim(1) / n as f64 // [N, 1, 1]
    } else {
        Tensor::zeros([batch, 1, 1], (&device, a.dtype()))
    };
    let shifted = a.clone() - mu.clone() * eye;
    let stats = Tensor::cat(
        vec![
            mu.clone().reshape([batch, 1]),
            shifted
                .clone()
                .abs()
                .sum_dim(1)
                .max_dim(2)
                .reshape([batch, 1]),
            a.clone().abs().sum_dim(1).max_dim(2).reshape([batch, 1]),
            // A sum carries NaN where a max may drop it (see `dense::one_norms`).
            a.clone().abs().sum_dim(1).sum_dim(2).reshape([batch, 1]),
        ],
        1,
    )
    .into_data()
    .convert::<f64>()
    .to_vec::<f64>()
    .expect("float tensor converts to f64");

    let mut taylor: Vec<(usize, usize, u64)> = Vec::new();
    let mut fallback: Vec<usize> = Vec::new();
    let mut non_finite: Vec<usize> = Vec::new();
    for i in 0..batch {
        let (norm_shifted, norm) = (stats[4 * i + 1], stats[4 * i + 2]);
        if !stats[4 * i + 3].is_finite() {
            non_finite.push(i);
            fallback.push(i);
            continue;
        }
        let choice = if precision == Precision::Double {
            None
        } else {
            taylor_steps(norm_shifted, config.m_max)
        };
        match choice {
            Some((m, s)) => {
                // Forming T costs about (4 + 4/3 + s') n-by-n products, each worth n
                // matrix-vector products; the Taylor loop costs m s of them.
                let (_, squarings) = choose(norm, super::ExpmMethod::Pade, precision);
                let dense_cost = (16.0 / 3.0 + squarings as f64) * n as f64;
                if config.fallback && (m as f64) * (s as f64) > dense_cost {
                    fallback.push(i);
                } else {
                    taylor.push((i, m, s));
                }
            }
            None => fallback.push(i),
        }
    }
    taylor.sort_by_key(|t| std::cmp::Reverse(t.2));
    let n_taylor = taylor.len();
    let mut order: Vec<usize> = taylor.iter().map(|t| t.0).collect();
    order.extend_from_slice(&fallback);
    let fallback_norms: Vec<f64> = fallback
        .iter()
        .map(|&i| {
            if non_finite.contains(&i) {
                f64::NAN
            } else {
                stats[4 * i + 2]
            }
        })
        .collect();
    let plan = ExpmvPlan {
        order,
        n_taylor,
        degrees: taylor.iter().map(|t| t.1).collect(),
        steps: taylor.iter().map(|t| t.2).collect(),
        fallback: (!fallback.is_empty())
            .then(|| ExpmPlan::new(&fallback_norms, super::ExpmMethod::Pade, precision)),
        non_finite,
    };

    let mut saved = ExpmvCheckpoints {
        config: *config,
        kernel: false,
        records: Vec::new(),
        routes: None,
        plan: plan.clone(),
        scaled: None,
        eta: None,
        inv_steps: None,
        inputs: Vec::new(),
        used: Vec::new(),
        fallback_exp: None,
    };
    let mut outputs = Vec::with_capacity(2);
    if n_taylor > 0 {
        let idx = &plan.order[..n_taylor];
        let a_t = reorder(shifted, idx);
        let mu_t = reorder(mu, idx);
        let mut b = reorder(v.clone(), idx).unsqueeze_dim::<3>(2); // [T, n, 1]
        let inv_s = per_matrix(plan.steps.iter().map(|&s| 1.0 / s as f64).collect(), &a_t);
        let eta = (mu_t * inv_s.clone()).exp();
        let scaled = a_t * inv_s.clone();
        let degrees = per_matrix(plan.degrees.iter().map(|&m| m as f64).collect(), &scaled);
        for k in 0..plan.max_steps() {
            let active_rows = plan.active_at(k);
            let prefix = |t: &Tensor<B, 3>| {
                if active_rows == n_taylor {
                    t.clone()
                } else {
                    t.clone().slice([0..active_rows])
                }
            };
            let (ak, bk, mk) = (prefix(&scaled), prefix(&b), prefix(&degrees));
            let m_top = plan.degrees[..active_rows]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
            let (f, used, used_max) = taylor_step(ak, bk.clone(), mk, m_top, config.tol);
            saved.inputs.push(bk);
            saved.used.push((used, used_max));
            let out = f * prefix(&eta);
            b = if active_rows == n_taylor {
                out
            } else {
                b.slice_assign([0..active_rows], out)
            };
        }
        outputs.push(b.squeeze_dim::<2>(2));
        saved.scaled = Some(scaled);
        saved.eta = Some(eta);
        saved.inv_steps = Some(inv_s);
    }
    if let Some(fplan) = &plan.fallback {
        let idx = &plan.order[n_taylor..];
        let t = dense::expm_planned(reorder(a, idx), fplan);
        let vf = reorder(v, idx).unsqueeze_dim::<3>(2);
        outputs.push(t.clone().matmul(vf).squeeze_dim::<2>(2));
        saved.fallback_exp = Some(t);
    }
    let y = Tensor::cat(outputs, 0);
    (
        dense::poison(dense::unsort_by(y, &plan.order), &plan.non_finite),
        saved,
    )
}

/// One outer step: F = sum_{j <= m} (A/s)^j b / j!, stopping per matrix once the last two terms
/// are below tol ||F||_inf. Returns F, the number of terms each matrix used and their maximum.
fn taylor_step<B: Backend>(
    scaled: Tensor<B, 3>,
    b: Tensor<B, 3>,
    degrees: Tensor<B, 3>,
    m_top: usize,
    tol: f64,
) -> (Tensor<B, 3>, Tensor<B, 3>, usize) {
    let mut f = b.clone();
    let mut w = b;
    let mut used = degrees.zeros_like();
    let mut active = degrees.clone().greater_elem(0.0).float().cast(f.dtype());
    let mut prev_norm = inf_norm(w.clone());
    let mut used_max = 0;
    for j in 1..=m_top {
        w = scaled.clone().matmul(w) * (active.clone() / j as f64);
        f = f + w.clone();
        used = used + active.clone();
        used_max = j;
        let norm = inf_norm(w.clone());
        let converged = (prev_norm + norm.clone()).lower_equal(inf_norm(f.clone()) * tol);
        let below_degree = degrees.clone().greater_elem(j as f64);
        active = active.mask_fill(converged.bool_or(below_degree.bool_not()), 0.0);
        prev_norm = norm;
        if j < m_top && active.clone().sum().into_scalar().to_f64() == 0.0 {
            break;
        }
    }
    (f, used, used_max)
}

/// Adjoint of [`expmv_forward`]: (Abar, vbar) from the output adjoint `grad` [N, n].
///
/// Taylor part, per outer step in reverse (`expm.md`): Fbar = eta bbar; for j = m..1:
/// Abar += (1/(s j)) acc w_{j-1}^T, acc = Fbar + (1/(s j)) A^T acc; bbar = acc. The inner vectors
/// w_j are recomputed from the step's checkpoint; the rank-one updates of a step are gathered into
/// one batched product. The shift, m and s are constants of the backward.
pub(crate) fn expmv_backward<B: Backend>(
    a: Tensor<B, 3>,
    v: Tensor<B, 2>,
    grad: Tensor<B, 2>,
    saved: &ExpmvCheckpoints<B>,
) -> (Tensor<B, 3>, Tensor<B, 2>) {
    let plan = &saved.plan;
    let [_, n, _] = a.dims();
    let n_taylor = plan.n_taylor;
    let grad = reorder(grad, &plan.order).unsqueeze_dim::<3>(2); // [N, n, 1]
    let mut abars = Vec::with_capacity(2);
    let mut vbars = Vec::with_capacity(2);
    if n_taylor > 0 {
        let scaled = saved.scaled.clone().expect("Taylor part saved");
        let eta = saved.eta.clone().expect("Taylor part saved");
        let scaled_t = scaled.clone().transpose();
        let mut bbar = grad.clone().slice([0..n_taylor]);
        let mut abar = scaled.zeros_like();
        for (k, (input, (used, used_max))) in saved.inputs.iter().zip(&saved.used).enumerate().rev()
        {
            let rows = plan.active_at(k as u64);
            let full = rows == n_taylor;
            let prefix = |t: &Tensor<B, 3>| {
                if full {
                    t.clone()
                } else {
                    t.clone().slice([0..rows])
                }
            };
            let (ak, akt) = (prefix(&scaled), prefix(&scaled_t));
            let fbar = prefix(&bbar) * prefix(&eta);
            // Recompute w_0 .. w_{J-1} with the forward's term masks.
            let mut ws = Vec::with_capacity(*used_max);
            let mut w = input.clone();
            for j in 1..=*used_max {
                ws.push(w.clone());
                if j < *used_max {
                    let mask = used
                        .clone()
                        .greater_equal_elem(j as f64)
                        .float()
                        .cast(w.dtype());
                    w = ak.clone().matmul(w) * (mask / j as f64);
                }
            }
            let mut acc = fbar.clone();
            let mut cols = Vec::with_capacity(*used_max);
            for j in (1..=*used_max).rev() {
                let coef = used
                    .clone()
                    .greater_equal_elem(j as f64)
                    .float()
                    .cast(acc.dtype())
                    / j as f64;
                cols.push(acc.clone() * coef.clone());
                acc = fbar.clone() + akt.clone().matmul(acc) * coef;
            }
            if *used_max > 0 {
                // cols[i] pairs with ws[J - 1 - i].
                ws.reverse();
                let delta = Tensor::cat(cols, 2).matmul(Tensor::cat(ws, 2).transpose());
                abar = if full {
                    abar + delta
                } else {
                    let head = abar.clone().slice([0..rows]) + delta;
                    abar.slice_assign([0..rows], head)
                };
            }
            bbar = if full {
                acc
            } else {
                bbar.slice_assign([0..rows], acc)
            };
        }
        // d(A'/s)/dA' = 1/s; the shift is a constant of the backward.
        let inv_s = saved.inv_steps.clone().expect("Taylor part saved");
        abars.push(abar * inv_s);
        vbars.push(bbar);
    }
    if let (Some(fplan), Some(t)) = (&plan.fallback, &saved.fallback_exp) {
        let idx = &plan.order[n_taylor..];
        let g = grad.slice([n_taylor..plan.order.len()]);
        let vf = reorder(v, idx).unsqueeze_dim::<3>(2);
        let tbar = g.clone().matmul(vf.transpose());
        abars.push(dense::expm_backward(reorder(a, idx), tbar, fplan));
        vbars.push(t.clone().transpose().matmul(g));
    }
    let abar = Tensor::cat(abars, 0);
    let vbar = Tensor::cat(vbars, 0).reshape([plan.order.len(), n]);
    (
        dense::poison(dense::unsort_by(abar, &plan.order), &plan.non_finite),
        dense::poison(dense::unsort_by(vbar, &plan.order), &plan.non_finite),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestBackend;

    /// theta_m from its definition, in f64: the coefficients of log(e^-x T_m(x)) by the
    /// log-of-a-series recurrence, then bisection on sum_k |c_k| x^(k-1) = u.
    fn theta_from_definition(m: usize) -> f64 {
        const K: usize = 160;
        let mut t = vec![0.0f64; K + 1];
        let mut f = 1.0;
        for (k, tk) in t.iter_mut().enumerate().take(m + 1) {
            if k > 0 {
                f /= k as f64;
            }
            *tk = f;
        }
        let mut l = vec![0.0f64; K + 1];
        for k in 1..=K {
            let s: f64 = (1..k).map(|j| j as f64 * l[j] * t[k - j]).sum();
            l[k] = (k as f64 * t[k] - s) / k as f64;
        }
        l[1] -= 1.0;
        let u = 2f64.powi(-24);
        let g = |x: f64| {
            (2..=K)
                .map(|k| l[k].abs() * x.powi(k as i32 - 1))
                .sum::<f64>()
                - u
        };
        let (mut lo, mut hi) = (0.0, 6.0);
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if g(mid) <= 0.0 { lo = mid } else { hi = mid }
        }
        lo
    }

    #[test]
    fn theta_table_follows_its_definition() {
        for m in [2, 5, 9, 12, 18, 21, 24] {
            let want = theta_from_definition(m);
            let got = TAYLOR_THETA_F32[m - 1];
            assert!((got / want - 1.0).abs() < 1e-6, "m = {m}: {got} vs {want}");
        }
    }

    #[test]
    fn degree_and_steps_minimise_the_matvec_count() {
        assert_eq!(taylor_steps(0.0, 18), Some((1, 1)));
        assert_eq!(taylor_steps(f64::NAN, 18), None);
        assert_eq!(taylor_steps(f64::INFINITY, 18), None);
        // A dense sweep of norms (the search stops early): the choice must equal the plain
        // minimum over every degree, smallest degree on ties.
        let sweep = (0..4000).map(|i| 1e-4 * 1.004f64.powi(i));
        for (norm, m_max) in sweep.flat_map(|x| [(x, 18), (x, 24), (x, 7)]) {
            let brute = (1..=m_max)
                .map(|k| (k, (norm / TAYLOR_THETA_F32[k - 1]).ceil().max(1.0) as u64))
                .min_by_key(|&(k, sk)| (k as u64 * sk, k))
                .unwrap();
            assert_eq!(
                taylor_steps(norm, m_max),
                Some(brute),
                "norm {norm}, m_max {m_max}"
            );
        }
        for norm in [0.01, 0.7, 3.0, 10.0, 250.0] {
            let (m, s) = taylor_steps(norm, 18).unwrap();
            assert!(norm / s as f64 <= TAYLOR_THETA_F32[m - 1] * (1.0 + 1e-12));
            for k in 1..=18 {
                let sk = (norm / TAYLOR_THETA_F32[k - 1]).ceil().max(1.0) as u64;
                assert!(
                    (m as u64) * s <= k as u64 * sk,
                    "norm {norm}: m {m} s {s} vs m {k}"
                );
            }
        }
    }

    #[test]
    fn early_termination_stops_before_the_degree_and_fallback_forms_t() {
        let device = Default::default();
        // Nilpotent A with ||A||_1 = 1: the series ends after two terms, far below m.
        let a = Tensor::<TestBackend, 3>::from_data(
            [[[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]],
            &device,
        );
        let v = Tensor::<TestBackend, 2>::from_data([[0.5, 2.0, -1.0]], &device);
        let (y, saved) = expmv_forward(a.clone(), v, &ExpmvConfig::default());
        let (m, _) = taylor_steps(1.0, 18).unwrap();
        let used = saved.used.iter().map(|u| u.1).max().unwrap();
        assert!(used < m, "used {used} of {m} terms");
        let y = y.into_data().to_vec::<f32>().unwrap();
        assert_eq!(y, vec![2.5, 2.0, -1.0]);
        // A large norm falls back to the explicit exponential.
        let big = a * 500.0;
        let v = Tensor::<TestBackend, 2>::from_data([[0.0, 1.0, 0.0]], &device);
        let (y, saved) = expmv_forward(big, v, &ExpmvConfig::default());
        assert_eq!(saved.plan.n_taylor, 0);
        assert!(saved.fallback_exp.is_some());
        assert_eq!(
            y.into_data().to_vec::<f32>().unwrap(),
            vec![500.0, 1.0, 0.0]
        );
    }
}
