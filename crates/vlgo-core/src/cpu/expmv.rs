//! exp(A) v for one f32 matrix in cache and its adjoint: the same choices as the tensor-op
//! version (`expm::expmv`: shift, m and s minimising the matrix-vector products, early
//! termination, fallback to the explicit exponential), run per matrix.

use super::expm::{self as dense, Ahead, Workspace, column_norms};
use super::simd::{VecMat, axpy, gemm_tn, matvec, vecmat, vecmat_pair};
use super::small;
use crate::expm::expmv::{KernelRecord, taylor_steps};
use crate::expm::plan::{Precision, choose};
use crate::expm::{ExpmMethod, ExpmvConfig};

enum Route {
    /// Taylor with degree m, s steps, shift mu.
    Taylor { m: usize, s: u64, mu: f32 },
    /// Form exp(A) and multiply.
    Dense,
    /// NaN or Inf in A.
    NonFinite,
}

/// (1-norm, shift mu, 1-norm of A - mu I); the norm is NaN when A holds NaN or Inf.
fn norms(a: &[f32], n: usize, shift: bool) -> (f64, f32, f64) {
    let mu = if shift {
        ((0..n).map(|i| a[i * n + i] as f64).sum::<f64>() / n as f64) as f32
    } else {
        0.0
    };
    match column_norms(a, n, mu) {
        // A NaN or Inf trace gives no shift; the norm is NaN anyway.
        Some((norm, shifted)) if mu.is_finite() => (norm, mu, shifted),
        _ => (f64::NAN, 0.0, f64::NAN),
    }
}

/// [`norms`] for a fixed size: the same sums in the same order (so the same choices), unrolled,
/// since at 3 x 3 the generic loops cost as much as the exponential itself.
fn norms_fixed<const N: usize>(a: &[f32], shift: bool) -> (f64, f32, f64) {
    let a = &a[..N * N];
    let column = |j: usize, mu: f32| -> f64 {
        let mut s = 0.0f64;
        for i in 0..N {
            let x = a[i * N + j] - if i == j { mu } else { 0.0 };
            s += x.abs() as f64;
        }
        s
    };
    let mut norm = 0.0f64;
    let mut total = 0.0f64;
    for j in 0..N {
        let s = column(j, 0.0);
        total += s;
        norm = norm.max(s);
    }
    if !total.is_finite() {
        return (f64::NAN, 0.0, f64::NAN);
    }
    let mu = if shift {
        let mut trace = 0.0f64;
        for i in 0..N {
            trace += a[i * N + i] as f64;
        }
        (trace / N as f64) as f32
    } else {
        0.0
    };
    if mu == 0.0 {
        return (norm, mu, norm);
    }
    let shifted = (0..N).map(|j| column(j, mu)).fold(0.0, f64::max);
    (norm, mu, shifted)
}

impl Route {
    fn record(&self, used: u32) -> KernelRecord {
        match *self {
            Route::Taylor { m, s, mu } => KernelRecord {
                kind: 0,
                m: m as u32,
                s,
                mu,
                used: if s == 1 { used } else { 0 },
            },
            Route::Dense => KernelRecord {
                kind: 1,
                ..KernelRecord::default()
            },
            Route::NonFinite => KernelRecord {
                kind: 2,
                ..KernelRecord::default()
            },
        }
    }

    fn from_record(r: &KernelRecord) -> Self {
        match r.kind {
            0 => Route::Taylor {
                m: r.m as usize,
                s: r.s,
                mu: r.mu,
            },
            1 => Route::Dense,
            _ => Route::NonFinite,
        }
    }
}

fn route(a: &[f32], n: usize, config: &ExpmvConfig) -> Route {
    let (norm, mu, shifted_norm) = match n {
        2 => norms_fixed::<2>(a, config.shift),
        3 => norms_fixed::<3>(a, config.shift),
        4 => norms_fixed::<4>(a, config.shift),
        _ => norms(a, n, config.shift),
    };
    if norm.is_nan() {
        return Route::NonFinite;
    }
    match taylor_steps(shifted_norm, config.m_max) {
        Some((m, s)) => {
            let products = (m as f64) * (s as f64);
            // The dense cost is at least 16 n / 3 products: only then is the plan worth reading.
            let dense_cost = || {
                let (_, squarings) = choose(norm, ExpmMethod::Pade, Precision::Single);
                (16.0 / 3.0 + squarings as f64) * n as f64
            };
            if config.fallback && products > 16.0 / 3.0 * n as f64 && products > dense_cost() {
                Route::Dense
            } else {
                Route::Taylor { m, s, mu }
            }
        }
        None => Route::Dense,
    }
}

/// Per-thread vectors of the Taylor loop, reused across matrices.
#[derive(Default)]
pub struct Vectors {
    sa: Vec<f32>,
    /// sa transposed: A' x is x^T sa^T, the fast product.
    st: Vec<f32>,
    /// Scaled adjoints of one step, one row per term.
    p: Vec<f32>,
    b: Vec<f32>,
    f: Vec<f32>,
    w: Vec<f32>,
    tmp: Vec<f32>,
    inputs: Vec<f32>,
    used: Vec<usize>,
    powers: Vec<f32>,
    bbar: Vec<f32>,
    fbar: Vec<f32>,
    acc: Vec<f32>,
    next: Vec<f32>,
    /// The coefficients and generators of a group of problems (`cpu::expmv_generated_batch`).
    pub(super) generators: Vec<f32>,
}

impl Vectors {
    /// (A - mu I) / s into `sa` and its transpose into `st`, v into `b`, zeros into `f`.
    fn start(&mut self, a: &[f32], v: &[f32], n: usize, mu: f32, s: u64) {
        let inv = 1.0 / s as f32;
        self.sa.clear();
        self.sa.extend(a.iter().map(|x| x * inv));
        for i in 0..n {
            self.sa[i * n + i] = (a[i * n + i] - mu) * inv;
        }
        self.st.resize(n * n, 0.0);
        super::simd::transpose(&self.sa, &mut self.st, n);
        self.b.clear();
        self.b.extend_from_slice(v);
        self.f.clear();
        self.f.resize(n, 0.0);
    }
}

fn inf_norm(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// One outer step from b: returns F and the number of terms used.
#[allow(clippy::too_many_arguments)]
fn taylor_step(
    st: &[f32],
    b: &[f32],
    f: &mut [f32],
    w: &mut Vec<f32>,
    tmp: &mut Vec<f32>,
    m: usize,
    tol: f32,
    n: usize,
) -> usize {
    f.copy_from_slice(b);
    w.clear();
    w.extend_from_slice(b);
    tmp.resize(n, 0.0);
    let mut prev = inf_norm(w);
    let mut used = 0;
    for j in 1..=m {
        vecmat(w, st, tmp, n, false);
        let inv = 1.0 / j as f32;
        for (wk, &t) in w.iter_mut().zip(tmp.iter()) {
            *wk = t * inv;
        }
        for (fk, &wk) in f.iter_mut().zip(w.iter()) {
            *fk += wk;
        }
        used = j;
        let norm = inf_norm(w);
        if prev + norm <= tol * inf_norm(f) {
            break;
        }
        prev = norm;
    }
    used
}

/// y = exp(A) v for one matrix.
pub fn forward(
    a: &[f32],
    v: &[f32],
    y: &mut [f32],
    n: usize,
    config: &ExpmvConfig,
    ws: &mut Workspace,
) -> KernelRecord {
    let route = route(a, n, config);
    let mut used = 0;
    match route {
        Route::NonFinite => y.fill(f32::NAN),
        Route::Dense => {
            let mut t = vec![0.0; n * n];
            dense::forward(a, &mut t, n, ExpmMethod::Pade, ws, Ahead::default());
            matvec(&t, v, y, n);
        }
        Route::Taylor { m, s, mu } if n <= small::MAX => {
            let tol = config.tol as f32;
            used = match n {
                1 => small::forward::<1>(a, v, y, m, s, mu, tol),
                2 => small::forward::<2>(a, v, y, m, s, mu, tol),
                3 => small::forward::<3>(a, v, y, m, s, mu, tol),
                _ => small::forward::<4>(a, v, y, m, s, mu, tol),
            };
        }
        Route::Taylor { m, s, mu } => {
            let eta = (mu / s as f32).exp();
            let t = &mut ws.vectors;
            t.start(a, v, n, mu, s);
            for _ in 0..s {
                // A single step's terms go into the record: its backward then need not
                // recompute the step (its input is v).
                used = taylor_step(
                    &t.st,
                    &t.b,
                    &mut t.f,
                    &mut t.w,
                    &mut t.tmp,
                    m,
                    config.tol as f32,
                    n,
                );
                for (bk, &fk) in t.b.iter_mut().zip(&t.f) {
                    *bk = eta * fk;
                }
            }
            y.copy_from_slice(&t.b);
        }
    }
    route.record(used as u32)
}

/// Adjoints (abar, vbar) of y = exp(A) v given ybar = `grad`. The step inputs are recomputed
/// and kept (s vectors); each step's inner vectors are recomputed from its input. `record`,
/// when the forward left one, replaces the route choice and, for a single step, the forward's
/// recomputation (the record holds the step's terms; its input is v).
#[allow(clippy::too_many_arguments)]
pub fn backward(
    a: &[f32],
    v: &[f32],
    grad: &[f32],
    abar: &mut [f32],
    vbar: &mut [f32],
    n: usize,
    config: &ExpmvConfig,
    record: Option<&KernelRecord>,
    ws: &mut Workspace,
) {
    let route = record.map_or_else(|| route(a, n, config), Route::from_record);
    let single_step_terms = record.and_then(|r| (r.used > 0).then_some(r.used as usize));
    match route {
        Route::NonFinite => {
            abar.fill(f32::NAN);
            vbar.fill(f32::NAN);
        }
        Route::Dense => {
            let mut t = vec![0.0; n * n];
            dense::forward(a, &mut t, n, ExpmMethod::Pade, ws, Ahead::default());
            // vbar = T^T g ; Tbar = g v^T.
            vbar.fill(0.0);
            for i in 0..n {
                axpy(grad[i], &t[i * n..i * n + n], vbar);
            }
            let mut tbar = vec![0.0; n * n];
            for i in 0..n {
                axpy(grad[i], v, &mut tbar[i * n..i * n + n]);
            }
            dense::backward(a, &tbar, abar, n, ExpmMethod::Pade, ws, Ahead::default());
        }
        Route::Taylor { m, s, mu } if n <= small::MAX => {
            let tol = config.tol as f32;
            let t = &mut ws.vectors;
            let (inputs, used, terms) = (&mut t.inputs, &mut t.used, single_step_terms);
            match n {
                1 => {
                    small::backward::<1>(a, v, grad, abar, vbar, m, s, mu, tol, terms, inputs, used)
                }
                2 => {
                    small::backward::<2>(a, v, grad, abar, vbar, m, s, mu, tol, terms, inputs, used)
                }
                3 => {
                    small::backward::<3>(a, v, grad, abar, vbar, m, s, mu, tol, terms, inputs, used)
                }
                _ => {
                    small::backward::<4>(a, v, grad, abar, vbar, m, s, mu, tol, terms, inputs, used)
                }
            }
        }
        Route::Taylor { m, s, mu } => {
            let eta = (mu / s as f32).exp();
            let tol = config.tol as f32;
            let t = &mut ws.vectors;
            t.start(a, v, n, mu, s);
            t.inputs.clear();
            t.used.clear();
            if let Some(terms) = single_step_terms.filter(|_| s == 1) {
                // The forward's record holds the single step's terms, and its input is v:
                // nothing to recompute.
                t.inputs.extend_from_slice(&v[..n]);
                t.used.push(terms);
            } else {
                for _ in 0..s {
                    t.inputs.extend_from_slice(&t.b);
                    let used = taylor_step(&t.st, &t.b, &mut t.f, &mut t.w, &mut t.tmp, m, tol, n);
                    t.used.push(used);
                    for (bk, &fk) in t.b.iter_mut().zip(&t.f) {
                        *bk = eta * fk;
                    }
                }
            }
            // Adjoint, step by step in reverse. abar here is w.r.t. A' / s.
            abar.fill(0.0);
            let Vectors {
                sa,
                st,
                p,
                inputs,
                used,
                powers,
                bbar,
                fbar,
                acc,
                next,
                ..
            } = t;
            bbar.clear();
            bbar.extend_from_slice(grad);
            for (k, &j_max) in used.iter().enumerate().rev() {
                // w_0 .. w_{J-1}, row j at powers[j n..], computed alongside acc below.
                powers.clear();
                powers.extend_from_slice(&inputs[k * n..(k + 1) * n]);
                powers.resize(j_max.max(1) * n, 0.0);
                let mut power = 1;
                fbar.clear();
                fbar.extend(bbar.iter().map(|&bb| eta * bb));
                acc.clear();
                acc.extend_from_slice(fbar);
                next.resize(n, 0.0);
                p.clear();
                p.resize(j_max * n, 0.0);
                for j in (1..=j_max).rev() {
                    // Row j - 1 of P is acc / j: abar gets (1/j) acc w_{j-1}^T, summed over the
                    // terms below in one pass.
                    let inv = 1.0 / j as f32;
                    let row = &mut p[(j - 1) * n..j * n];
                    for (r, &x) in row.iter_mut().zip(acc.iter()) {
                        *r = x * inv;
                    }
                    // acc = fbar + (1/j) A'^T acc, and the next power w_power = A' w_{power-1}
                    // / power in the same pass: two independent chains of multiply-adds.
                    next.copy_from_slice(fbar);
                    if power < j_max {
                        let (lo, hi) = powers.split_at_mut(power * n);
                        let power_term = VecMat {
                            x: &lo[(power - 1) * n..],
                            m: st,
                            y: &mut hi[..n],
                            accumulate: false,
                        };
                        let acc_term = VecMat {
                            x: row,
                            m: sa,
                            y: next,
                            accumulate: true,
                        };
                        vecmat_pair(power_term, acc_term, n);
                        let inv = 1.0 / power as f32;
                        hi[..n].iter_mut().for_each(|x| *x *= inv);
                        power += 1;
                    } else {
                        vecmat(row, sa, next, n, true);
                    }
                    std::mem::swap(acc, next);
                }
                gemm_tn(p, powers, abar, n, j_max);
                bbar.copy_from_slice(acc);
            }
            let bbar = &t.bbar;
            let inv_s = 1.0 / s as f32;
            abar.iter_mut().for_each(|x| *x *= inv_s);
            vbar.copy_from_slice(bbar);
        }
    }
}
