//! exp(A) v for one f32 matrix in cache and its adjoint: the same choices as the tensor-op
//! version (`expm::expmv`: shift, m and s minimising the matrix-vector products, early
//! termination, fallback to the explicit exponential), run per matrix.

use super::expm::{self as dense, Workspace, one_norm};
use super::simd::{axpy, matvec};
use crate::expm::expmv::taylor_steps;
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

fn route(a: &[f32], n: usize, config: &ExpmvConfig) -> Route {
    let norm = one_norm(a, n);
    if norm.is_nan() {
        return Route::NonFinite;
    }
    let mu = if config.shift {
        ((0..n).map(|i| a[i * n + i] as f64).sum::<f64>() / n as f64) as f32
    } else {
        0.0
    };
    let shifted_norm = (0..n)
        .map(|j| {
            (0..n)
                .map(|i| {
                    let x = a[i * n + j] - if i == j { mu } else { 0.0 };
                    x.abs() as f64
                })
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    match taylor_steps(shifted_norm, config.m_max) {
        Some((m, s)) => {
            let (_, squarings) = choose(norm, ExpmMethod::Pade, Precision::Single);
            let dense_cost = (16.0 / 3.0 + squarings as f64) * n as f64;
            if config.fallback && (m as f64) * (s as f64) > dense_cost {
                Route::Dense
            } else {
                Route::Taylor { m, s, mu }
            }
        }
        None => Route::Dense,
    }
}

fn inf_norm(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// (A - mu I) / s.
fn scaled(a: &[f32], n: usize, mu: f32, s: u64) -> Vec<f32> {
    let inv = 1.0 / s as f32;
    let mut out: Vec<f32> = a.iter().map(|x| x * inv).collect();
    for i in 0..n {
        out[i * n + i] = (a[i * n + i] - mu) * inv;
    }
    out
}

/// One outer step from b: returns F and the number of terms used.
#[allow(clippy::too_many_arguments)]
fn taylor_step(
    sa: &[f32],
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
        matvec(sa, w, tmp, n);
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
) {
    match route(a, n, config) {
        Route::NonFinite => y.fill(f32::NAN),
        Route::Dense => {
            let mut t = vec![0.0; n * n];
            dense::forward(a, &mut t, n, ExpmMethod::Pade, ws);
            matvec(&t, v, y, n);
        }
        Route::Taylor { m, s, mu } => {
            let sa = scaled(a, n, mu, s);
            let eta = (mu / s as f32).exp();
            let (mut b, mut f) = (v.to_vec(), vec![0.0; n]);
            let (mut w, mut tmp) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..s {
                taylor_step(&sa, &b, &mut f, &mut w, &mut tmp, m, config.tol as f32, n);
                for (bk, &fk) in b.iter_mut().zip(&f) {
                    *bk = eta * fk;
                }
            }
            y.copy_from_slice(&b);
        }
    }
}

/// Adjoints (abar, vbar) of y = exp(A) v given ybar = `grad`. The step inputs are recomputed
/// and kept (s + 1 vectors); each step's inner vectors are recomputed from its input.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    a: &[f32],
    v: &[f32],
    grad: &[f32],
    abar: &mut [f32],
    vbar: &mut [f32],
    n: usize,
    config: &ExpmvConfig,
    ws: &mut Workspace,
) {
    match route(a, n, config) {
        Route::NonFinite => {
            abar.fill(f32::NAN);
            vbar.fill(f32::NAN);
        }
        Route::Dense => {
            let mut t = vec![0.0; n * n];
            dense::forward(a, &mut t, n, ExpmMethod::Pade, ws);
            // vbar = T^T g ; Tbar = g v^T.
            vbar.fill(0.0);
            for i in 0..n {
                axpy(grad[i], &t[i * n..i * n + n], vbar);
            }
            let mut tbar = vec![0.0; n * n];
            for i in 0..n {
                axpy(grad[i], v, &mut tbar[i * n..i * n + n]);
            }
            dense::backward(a, &tbar, abar, n, ExpmMethod::Pade, ws);
        }
        Route::Taylor { m, s, mu } => {
            let sa = scaled(a, n, mu, s);
            let eta = (mu / s as f32).exp();
            let tol = config.tol as f32;
            let mut inputs = Vec::with_capacity(s as usize);
            let mut used = Vec::with_capacity(s as usize);
            let (mut b, mut f) = (v.to_vec(), vec![0.0; n]);
            let (mut w, mut tmp) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..s {
                inputs.push(b.clone());
                used.push(taylor_step(&sa, &b, &mut f, &mut w, &mut tmp, m, tol, n));
                for (bk, &fk) in b.iter_mut().zip(&f) {
                    *bk = eta * fk;
                }
            }
            // Adjoint, step by step in reverse. abar here is w.r.t. A' / s.
            abar.fill(0.0);
            let mut bbar = grad.to_vec();
            let mut ws_vec: Vec<Vec<f32>> = Vec::new();
            let mut fbar = vec![0.0; n];
            let mut acc = vec![0.0; n];
            let mut next = vec![0.0; n];
            for (input, &j_max) in inputs.iter().zip(&used).rev() {
                // w_0 .. w_{J-1}
                ws_vec.resize(j_max.max(1), Vec::new());
                ws_vec[0].clear();
                ws_vec[0].extend_from_slice(input);
                for j in 1..j_max {
                    let (lo, hi) = ws_vec.split_at_mut(j);
                    hi[0].resize(n, 0.0);
                    matvec(&sa, &lo[j - 1], &mut hi[0], n);
                    let inv = 1.0 / j as f32;
                    hi[0].iter_mut().for_each(|x| *x *= inv);
                }
                for (fb, &bb) in fbar.iter_mut().zip(&bbar) {
                    *fb = eta * bb;
                }
                acc.copy_from_slice(&fbar);
                for j in (1..=j_max).rev() {
                    let inv = 1.0 / j as f32;
                    // abar += (1/j) acc w_{j-1}^T
                    for i in 0..n {
                        axpy(acc[i] * inv, &ws_vec[j - 1], &mut abar[i * n..i * n + n]);
                    }
                    // acc = fbar + (1/j) A'^T acc  (A'^T acc as a sum of scaled rows)
                    next.copy_from_slice(&fbar);
                    for i in 0..n {
                        axpy(acc[i] * inv, &sa[i * n..i * n + n], &mut next);
                    }
                    std::mem::swap(&mut acc, &mut next);
                }
                bbar.copy_from_slice(&acc);
            }
            let inv_s = 1.0 / s as f32;
            abar.iter_mut().for_each(|x| *x *= inv_s);
            vbar.copy_from_slice(&bbar);
        }
    }
}
