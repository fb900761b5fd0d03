//! The explicit exponential of one f32 matrix in cache, forward and reverse: the same plan,
//! schemes and reverse mode as the tensor-op version (`expm::dense`), run per matrix.

use std::sync::OnceLock;

use super::lu;
use super::simd::{axpy, matmul, transpose};
use crate::expm::ExpmMethod;
use crate::expm::plan::{Precision, choose};
use crate::expm::scheme::{self, Program, Step};

/// The schemes of every f32 degree, built once.
fn program(method: ExpmMethod, degree: usize) -> &'static Program {
    static PADE: OnceLock<Vec<(usize, Program)>> = OnceLock::new();
    static TAYLOR: OnceLock<Vec<(usize, Program)>> = OnceLock::new();
    let table = match method {
        ExpmMethod::Pade => {
            PADE.get_or_init(|| [3, 5, 7].iter().map(|&m| (m, scheme::pade(m))).collect())
        }
        ExpmMethod::Taylor => TAYLOR.get_or_init(|| {
            [1, 2, 4, 8, 12, 18]
                .iter()
                .map(|&m| (m, scheme::taylor(m)))
                .collect()
        }),
    };
    &table
        .iter()
        .find(|(m, _)| *m == degree)
        .expect("degree from the f32 table")
        .1
}

/// Per-thread scratch, reused across matrices.
#[derive(Default)]
pub struct Workspace {
    values: Vec<Vec<f32>>,
    bars: Vec<Vec<f32>>,
    live: Vec<bool>,
    squares: Vec<Vec<f32>>,
    q: Vec<f32>,
    r0: Vec<f32>,
    t1: Vec<f32>,
    t2: Vec<f32>,
    t3: Vec<f32>,
    perm: Vec<usize>,
    /// Vectors of the exponential-times-vector kernel.
    pub(super) vectors: super::expmv::Vectors,
}

fn ensure(buffers: &mut Vec<Vec<f32>>, count: usize, len: usize) {
    if buffers.len() < count {
        buffers.resize_with(count, Vec::new);
    }
    for b in buffers.iter_mut().take(count) {
        b.resize(len, 0.0);
    }
}

impl Workspace {
    fn prepare(&mut self, n: usize, slots: usize) {
        let nn = n * n;
        ensure(&mut self.values, slots, nn);
        ensure(&mut self.bars, slots, nn);
        self.live.clear();
        self.live.resize(slots, false);
        for b in [
            &mut self.q,
            &mut self.r0,
            &mut self.t1,
            &mut self.t2,
            &mut self.t3,
        ] {
            b.resize(nn, 0.0);
        }
        self.perm.resize(n, 0);
    }
}

/// 1-norm in f64; NaN when the matrix holds NaN or Inf.
pub fn one_norm(a: &[f32], n: usize) -> f64 {
    let mut best = 0.0f64;
    let mut total = 0.0f64;
    for j in 0..n {
        let s: f64 = (0..n).map(|i| a[i * n + j].abs() as f64).sum();
        total += s;
        best = best.max(s);
    }
    if total.is_finite() { best } else { f64::NAN }
}

fn evaluate(program: &Program, n: usize, ws: &mut Workspace) {
    for (k, step) in program.steps.iter().enumerate() {
        let (lo, hi) = ws.values.split_at_mut(k + 1);
        let out = &mut hi[0];
        match step {
            Step::MatMul(i, j) => matmul(&lo[*i], &lo[*j], out, n, false),
            Step::Lin(terms, eye) => {
                out.fill(0.0);
                for &(i, c) in terms {
                    if c != 0.0 {
                        axpy(c as f32, &lo[i], out);
                    }
                }
                if *eye != 0.0 {
                    for d in 0..n {
                        out[d * n + d] += *eye as f32;
                    }
                }
            }
        }
    }
}

/// Scales A into values[0], evaluates the scheme and leaves the unsquared approximant in r0
/// (and, for Padé, Q = V - U in q). Returns (program, s).
fn approximant(
    a: &[f32],
    norm: f64,
    n: usize,
    method: ExpmMethod,
    ws: &mut Workspace,
) -> (&'static Program, u32) {
    let (degree, s) = choose(norm, method, Precision::Single);
    let program = program(method, degree);
    ws.prepare(n, program.steps.len() + 1);
    let scale = (-(s as f64)).exp2() as f32;
    for (x, &y) in ws.values[0].iter_mut().zip(a) {
        *x = y * scale;
    }
    evaluate(program, n, ws);
    let (u, v) = program.outputs;
    if program.pade {
        for k in 0..n * n {
            let (uk, vk) = (ws.values[u][k], ws.values[v][k]);
            ws.q[k] = vk - uk;
            ws.r0[k] = vk + uk;
        }
        ws.t1.copy_from_slice(&ws.q);
        lu::factor(&mut ws.t1, &mut ws.perm, n);
        lu::solve(&ws.t1, &ws.perm, &mut ws.r0, &mut ws.t2, n);
    } else {
        ws.r0.copy_from_slice(&ws.values[u]);
    }
    (program, s)
}

/// exp(A) of one row-major n x n f32 matrix into `out`. Non-finite input gives NaN.
pub fn forward(a: &[f32], out: &mut [f32], n: usize, method: ExpmMethod, ws: &mut Workspace) {
    let norm = one_norm(a, n);
    if norm.is_nan() {
        out.fill(f32::NAN);
        return;
    }
    let (_, s) = approximant(a, norm, n, method, ws);
    out.copy_from_slice(&ws.r0);
    for _ in 0..s {
        matmul(out, out, &mut ws.t2, n, false);
        out.copy_from_slice(&ws.t2);
    }
}

fn add_bar(ws: &mut Workspace, slot: usize, g: &[f32], sign: f32) {
    if ws.live[slot] {
        axpy(sign, g, &mut ws.bars[slot]);
    } else {
        for (b, &x) in ws.bars[slot].iter_mut().zip(g) {
            *b = sign * x;
        }
        ws.live[slot] = true;
    }
}

/// The adjoint of A given the adjoint `grad` of exp(A), into `abar`.
pub fn backward(
    a: &[f32],
    grad: &[f32],
    abar: &mut [f32],
    n: usize,
    method: ExpmMethod,
    ws: &mut Workspace,
) {
    let norm = one_norm(a, n);
    if norm.is_nan() {
        abar.fill(f32::NAN);
        return;
    }
    let nn = n * n;
    let (program, s) = approximant(a, norm, n, method, ws);
    // Forward squarings, keeping each input.
    ensure(&mut ws.squares, s as usize, nn);
    ws.t3.copy_from_slice(&ws.r0);
    for k in 0..s as usize {
        ws.squares[k].copy_from_slice(&ws.t3);
        matmul(&ws.squares[k], &ws.squares[k], &mut ws.t3, n, false);
    }
    // Back through the squarings: G <- G Y^T + Y^T G.
    let mut g = grad.to_vec();
    for k in (0..s as usize).rev() {
        transpose(&ws.squares[k], &mut ws.t1, n);
        matmul(&g, &ws.t1, &mut ws.t2, n, false);
        matmul(&ws.t1, &g, &mut ws.t2, n, true);
        g.copy_from_slice(&ws.t2);
    }
    let (u, v) = program.outputs;
    if program.pade {
        // Pbar = Q^{-T} G, Qbar = -Pbar R^T; Ubar = Pbar - Qbar, Vbar = Pbar + Qbar.
        transpose(&ws.q, &mut ws.t1, n);
        lu::factor(&mut ws.t1, &mut ws.perm, n);
        lu::solve(&ws.t1, &ws.perm, &mut g, &mut ws.t2, n);
        transpose(&ws.r0, &mut ws.t3, n);
        matmul(&g, &ws.t3, &mut ws.t2, n, false); // -Qbar
        let bars = ws.t1.iter_mut().zip(ws.t3.iter_mut());
        for ((ubar, vbar), (gk, qk)) in bars.zip(g.iter().zip(&ws.t2)).take(nn) {
            *ubar = gk + qk;
            *vbar = gk - qk;
        }
        let (ubar, vbar) = (ws.t1.clone(), ws.t3.clone());
        add_bar(ws, u, &ubar, 1.0);
        add_bar(ws, v, &vbar, 1.0);
    } else {
        add_bar(ws, u, &g, 1.0);
    }
    for (k, step) in program.steps.iter().enumerate().rev() {
        let out = k + 1;
        if !ws.live[out] {
            continue;
        }
        let bar = std::mem::take(&mut ws.bars[out]);
        match step {
            Step::MatMul(i, j) => {
                // bar_i += bar V_j^T ; bar_j += V_i^T bar
                transpose(&ws.values[*j], &mut ws.t1, n);
                matmul(&bar, &ws.t1, &mut ws.t2, n, false);
                let t2 = std::mem::take(&mut ws.t2);
                add_bar(ws, *i, &t2, 1.0);
                ws.t2 = t2;
                transpose(&ws.values[*i], &mut ws.t1, n);
                matmul(&ws.t1, &bar, &mut ws.t2, n, false);
                let t2 = std::mem::take(&mut ws.t2);
                add_bar(ws, *j, &t2, 1.0);
                ws.t2 = t2;
            }
            Step::Lin(terms, _) => {
                for &(i, c) in terms {
                    if c != 0.0 {
                        add_bar(ws, i, &bar, c as f32);
                    }
                }
            }
        }
        ws.bars[out] = bar;
        ws.live[out] = false;
    }
    let scale = (-(s as f64)).exp2() as f32;
    if ws.live[0] {
        for (x, &y) in abar.iter_mut().zip(&ws.bars[0]) {
            *x = y * scale;
        }
    } else {
        abar.fill(0.0);
    }
}
