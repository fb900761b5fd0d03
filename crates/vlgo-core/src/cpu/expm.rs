//! The explicit exponential of one f32 matrix in cache, forward and reverse: the same plan,
//! schemes and reverse mode as the tensor-op version (`expm::dense`), run per matrix.

use std::sync::OnceLock;

use super::aligned::Aligned;
use super::lu;
pub(super) use super::simd::Ahead;
use super::simd::{axpy, lin_comb, matmul, matmul_ahead, pade_tail, transpose, vectorised};
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

/// Per-thread scratch, reused across matrices; its matrices start on cache lines.
#[derive(Default)]
pub struct Workspace {
    values: Vec<Aligned>,
    bars: Vec<Aligned>,
    live: Vec<bool>,
    squares: Vec<Aligned>,
    /// The unit lower factor of the Padé solve.
    lower: Aligned,
    r0: Aligned,
    t1: Aligned,
    t2: Aligned,
    t3: Aligned,
    perm: Vec<usize>,
    /// The transposed adjoint carried back through the squarings.
    g: Aligned,
    /// Vectors of the exponential-times-vector kernel.
    pub(super) vectors: super::expmv::Vectors,
}

fn ensure(buffers: &mut Vec<Aligned>, count: usize, len: usize) {
    if buffers.len() < count {
        buffers.resize_with(count, Aligned::default);
    }
    for b in buffers.iter_mut().take(count) {
        b.resize(len);
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
            &mut self.lower,
            &mut self.r0,
            &mut self.t1,
            &mut self.t2,
            &mut self.t3,
        ] {
            b.resize(nn);
        }
        self.perm.resize(n, 0);
    }
}

/// The largest column sums of |A| and of |A - mu I|, in f64, accumulated row by row in blocks of
/// 64 columns (contiguous and vectorised, no allocation: this runs once per matrix, also for
/// 3 x 3 ones); `None` when the matrix holds NaN or Inf. Each column is summed in row order, with
/// the shifted diagonal entry in its place.
pub fn column_norms(a: &[f32], n: usize, mu: f32) -> Option<(f64, f64)> {
    // Once per matrix, over all of it: compiled for the baseline's two f64 lanes this pass took
    // about 5 % of the Padé forward at n = 64 (`docs/expm.md`).
    vectorised(
        #[inline(always)]
        || column_norms_body(a, n, mu, &mut []),
    )
}

/// `column_norms` without a shift that also copies A into `copy` (n x n) on the way: the
/// exponential reads A once, not once for its norm and again for its scaling.
fn column_norms_copying(a: &[f32], n: usize, copy: &mut [f32]) -> Option<f64> {
    vectorised(
        #[inline(always)]
        || column_norms_body(a, n, 0.0, copy).map(|(norm, _)| norm),
    )
}

/// The columns of one block of [`column_norms_body`]'s sums.
const BLOCK: usize = 64;

/// The column norms, and A copied into `copy` unless that is empty.
#[inline(always)]
fn column_norms_body(a: &[f32], n: usize, mu: f32, copy: &mut [f32]) -> Option<(f64, f64)> {
    // 4 AVX2 vectors of f64 (2 on AVX-512).
    const STRIP: usize = 16;
    let (mut norm, mut shifted, mut total) = (0.0f64, 0.0f64, 0.0f64);
    for j0 in (0..n).step_by(BLOCK) {
        let w = BLOCK.min(n - j0);
        let (mut sums, mut shifted_sums) = ([0.0f64; BLOCK], [0.0f64; BLOCK]);
        if mu == 0.0 && w.is_multiple_of(STRIP) && !copy.is_empty() {
            // The copying pass of the exponential (no shift), a strip of columns at a time down
            // all the rows, its sums held in registers: over the block's rows at once, the sums
            // went through memory on every row, and this pass took 3 % of the Padé forward at
            // n = 64 (`docs/expm.md`). Each column is still summed in row order.
            for (s0, sums) in (j0..j0 + w)
                .step_by(STRIP)
                .zip(sums.chunks_exact_mut(STRIP))
            {
                let mut acc = [0.0f64; STRIP];
                for (row, to) in a.chunks_exact(n).zip(copy.chunks_exact_mut(n)).take(n) {
                    // Through a local array: zipped with the sums, the copy compiled to one
                    // scalar move per entry.
                    let row: [f32; STRIP] = row[s0..s0 + STRIP].try_into().unwrap();
                    to[s0..s0 + STRIP].copy_from_slice(&row);
                    for (s, &x) in acc.iter_mut().zip(&row) {
                        *s += x.abs() as f64;
                    }
                }
                sums.copy_from_slice(&acc);
            }
        } else {
            column_sums(a, n, mu, copy, (j0, w), (&mut sums, &mut shifted_sums));
        }
        total += sums[..w].iter().sum::<f64>();
        norm = sums[..w].iter().copied().fold(norm, f64::max);
        shifted = shifted_sums[..w].iter().copied().fold(shifted, f64::max);
    }
    if mu == 0.0 {
        shifted = norm;
    }
    total.is_finite().then_some((norm, shifted))
}

/// The sums of [`column_norms_body`] over one block of columns, j0..j0 + w, row by row.
#[inline(always)]
fn column_sums(
    a: &[f32],
    n: usize,
    mu: f32,
    copy: &mut [f32],
    (j0, w): (usize, usize),
    (sums, shifted_sums): (&mut [f64; BLOCK], &mut [f64; BLOCK]),
) {
    for (i, row) in a.chunks_exact(n).take(n).enumerate() {
        let row = &row[j0..j0 + w];
        if copy.is_empty() {
            for (s, &x) in sums[..w].iter_mut().zip(row) {
                *s += x.abs() as f64;
            }
        } else {
            // In the loop of the sums, not a `copy_from_slice` per row: that compiles to a
            // library call per row.
            let to = &mut copy[i * n + j0..i * n + j0 + w];
            for ((s, &x), y) in sums[..w].iter_mut().zip(row).zip(to) {
                *s += x.abs() as f64;
                *y = x;
            }
        }
        // Without a shift (every `expm` plan) the shifted sums are the sums themselves.
        if mu != 0.0 {
            for (c, (s, &x)) in shifted_sums[..w].iter_mut().zip(row).enumerate() {
                let x = if j0 + c == i { x - mu } else { x };
                *s += x.abs() as f64;
            }
        }
    }
}

impl Workspace {
    /// Copies A into values[0] and returns its 1-norm in f64; `None` when A holds NaN or Inf.
    fn load(&mut self, a: &[f32], n: usize) -> Option<f64> {
        ensure(&mut self.values, 1, n * n);
        column_norms_copying(a, n, &mut self.values[0])
    }
}

/// A linear combination's terms as the kernels take them: the values they name, their
/// coefficients in f32, the zero ones left out.
fn nonzero_terms<'a>(
    terms: &'a [(usize, f64)],
    values: &'a [Aligned],
) -> impl Iterator<Item = (&'a [f32], f32)> {
    terms
        .iter()
        .filter(|(_, c)| *c != 0.0)
        .map(|&(i, c)| (&values[i][..], c as f32))
}

/// Runs the first `steps` steps of the program.
fn evaluate(program: &Program, steps: usize, n: usize, ws: &mut Workspace, ahead: Ahead) {
    let products = program
        .steps
        .iter()
        .filter(|s| matches!(s, Step::MatMul(..)))
        .count();
    let share = ahead.lines().div_ceil(products.max(1));
    let mut ahead = ahead;
    for (k, step) in program.steps.iter().enumerate().take(steps) {
        let (lo, hi) = ws.values.split_at_mut(k + 1);
        let out = &mut hi[0];
        match step {
            Step::MatMul(i, j) => {
                let (now, rest) = ahead.split(share);
                ahead = rest;
                matmul_ahead(&lo[*i], &lo[*j], out, n, false, now);
            }
            Step::Lin(terms, eye) => {
                // Up to CHUNK terms per pass over the output, from a list on the stack.
                const CHUNK: usize = 8;
                let mut list: [(&[f32], f32); CHUNK] = [(&[], 0.0); CHUNK];
                let mut count = 0;
                let mut passes = 0;
                for term in nonzero_terms(terms, lo) {
                    list[count] = term;
                    count += 1;
                    if count == CHUNK {
                        lin_comb(&list, out, passes > 0);
                        (count, passes) = (0, passes + 1);
                    }
                }
                if count > 0 || passes == 0 {
                    lin_comb(&list[..count], out, passes > 0);
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

/// Scales A (which [`Workspace::load`] put in values[0]) in place, evaluates the scheme and
/// leaves the unsquared approximant in r0 (and, for Padé, the LU factors of Q = V - U in t1,
/// lower and perm, which the backward reuses). Returns (program, s).
fn approximant(
    norm: f64,
    n: usize,
    method: ExpmMethod,
    ws: &mut Workspace,
    ahead: Ahead,
) -> (&'static Program, u32) {
    let (degree, s) = choose(norm, method, Precision::Single);
    let program = program(method, degree);
    ws.prepare(n, program.steps.len() + 1);
    if s > 0 {
        let scale = (-(s as f64)).exp2() as f32;
        let scaled = &mut ws.values[0];
        vectorised(
            #[inline(always)]
            || scaled.iter_mut().for_each(|x| *x *= scale),
        );
    }
    let (u, v) = program.outputs;
    let last = program.steps.len();
    if program.pade {
        // V, the last step, is summed straight into Q = V - U (into the buffer the
        // factorisation overwrites) and P = V + U, never stored: V's adjoint needs no value.
        let Some(Step::Lin(terms, eye)) = program.steps.last().filter(|_| v == last) else {
            unreachable!("every Padé scheme ends with V's linear combination");
        };
        evaluate(program, last - 1, n, ws, ahead);
        // At most three even powers (degree 7).
        let mut list: [(&[f32], f32); 4] = [(&[], 0.0); 4];
        let mut count = 0;
        for term in nonzero_terms(terms, &ws.values) {
            list[count] = term;
            count += 1;
        }
        let qp = (&mut ws.t1[..], &mut ws.r0[..]);
        pade_tail(&list[..count], *eye as f32, &ws.values[u], qp, n);
        lu::factor(&mut ws.t1, &mut ws.lower, &mut ws.perm, n);
        lu::solve(&ws.t1, &ws.lower, &ws.perm, &mut ws.r0, &mut ws.t2, n);
    } else {
        evaluate(program, last, n, ws, ahead);
        ws.r0.copy_from_slice(&ws.values[u]);
    }
    (program, s)
}

/// exp(A) of one row-major n x n f32 matrix into `out`, fetching `ahead` (a batch's next
/// matrix and output part, or nothing) during the products. Non-finite input gives NaN.
pub fn forward(
    a: &[f32],
    out: &mut [f32],
    n: usize,
    method: ExpmMethod,
    ws: &mut Workspace,
    ahead: Ahead,
) {
    let Some(norm) = ws.load(a, n) else {
        out.fill(f32::NAN);
        return;
    };
    let (_, s) = approximant(norm, n, method, ws, ahead);
    // Solving straight into `out` instead (the solve split into its two triangular phases so
    // that the second could write there) measured 8-13 % slower at [4096, 64, 64]. The
    // squarings run in the workspace, whose matrices start on cache lines (the caller's need
    // not), and `out` is written once.
    for _ in 0..s {
        matmul(&ws.r0, &ws.r0, &mut ws.t2, n, false);
        std::mem::swap(&mut ws.r0, &mut ws.t2);
    }
    out.copy_from_slice(&ws.r0);
}

fn add_bar(ws: &mut Workspace, slot: usize, g: &[f32], sign: f32) {
    if ws.live[slot] {
        axpy(sign, g, &mut ws.bars[slot]);
    } else {
        let bar = &mut ws.bars[slot];
        vectorised(
            #[inline(always)]
            || {
                for (b, &x) in bar.iter_mut().zip(g) {
                    *b = sign * x;
                }
            },
        );
        ws.live[slot] = true;
    }
}

/// bars[slot] (+)= x y: written in place by the product (no temporary, no extra pass).
fn add_product(
    bars: &mut [Aligned],
    live: &mut [bool],
    slot: usize,
    xy: (&[f32], &[f32]),
    n: usize,
) {
    matmul(xy.0, xy.1, &mut bars[slot], n, live[slot]);
    live[slot] = true;
}

/// The adjoint of A given the adjoint `grad` of exp(A), into `abar`, fetching `ahead` (a
/// batch's next matrix, adjoint and output part, or nothing) during the approximant's products.
///
/// The reverse pass carries transposed adjoints: for C = X Y, Xbar = Cbar Y^T and
/// Ybar = X^T Cbar become Xbar^T = Y Cbar^T and Ybar^T = Cbar^T X, plain products that need no
/// transposed operands, so a matrix is transposed twice in all (plus three times around the
/// Padé solve) instead of twice per product.
pub fn backward(
    a: &[f32],
    grad: &[f32],
    abar: &mut [f32],
    n: usize,
    method: ExpmMethod,
    ws: &mut Workspace,
    ahead: Ahead,
) {
    let Some(norm) = ws.load(a, n) else {
        abar.fill(f32::NAN);
        return;
    };
    let nn = n * n;
    let (program, s) = approximant(norm, n, method, ws, ahead);
    // Forward squarings, keeping each input.
    ensure(&mut ws.squares, s as usize, nn);
    ws.t3.copy_from_slice(&ws.r0);
    for k in 0..s as usize {
        ws.squares[k].copy_from_slice(&ws.t3);
        matmul(&ws.squares[k], &ws.squares[k], &mut ws.t3, n, false);
    }
    // Back through the squarings: G <- G Y^T + Y^T G, transposed G^T <- Y G^T + G^T Y.
    let mut g = std::mem::take(&mut ws.g);
    g.resize(nn);
    transpose(grad, &mut g, n);
    for y in ws.squares[..s as usize].iter().rev() {
        matmul(y, &g, &mut ws.t2, n, false);
        matmul(&g, y, &mut ws.t2, n, true);
        g.copy_from_slice(&ws.t2);
    }
    let (u, v) = program.outputs;
    if program.pade {
        // Pbar = Q^{-T} G, Qbar = -Pbar R^T; transposed, -Qbar^T = R Pbar^T, and
        // Ubar^T = Pbar^T - Qbar^T, Vbar^T = Pbar^T + Qbar^T.
        // Q's factors from `approximant` are still in t1, lower and perm: Q^T's system is
        // solved with them (no second factorisation).
        transpose(&g, &mut ws.t2, n);
        lu::solve_transposed(&ws.t1, &ws.lower, &ws.perm, &mut ws.t2, &mut ws.t3, n);
        transpose(&ws.t2, &mut ws.t3, n); // Pbar^T
        matmul(&ws.r0, &ws.t3, &mut ws.t2, n, false); // -Qbar^T
        let (bars, pq) = (
            ws.t1.iter_mut().zip(g.iter_mut()),
            ws.t3.iter().zip(ws.t2.iter()),
        );
        vectorised(
            #[inline(always)]
            || {
                for ((ubar, vbar), (pk, qk)) in bars.zip(pq).take(nn) {
                    *ubar = pk + qk;
                    *vbar = pk - qk;
                }
            },
        );
        let ubar = std::mem::take(&mut ws.t1);
        add_bar(ws, u, &ubar, 1.0);
        ws.t1 = ubar;
        add_bar(ws, v, &g, 1.0);
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
                // bar_i^T += V_j bar^T ; bar_j^T += bar^T V_i
                let (bars, live) = (&mut ws.bars, &mut ws.live);
                add_product(bars, live, *i, (&ws.values[*j], &bar), n);
                add_product(bars, live, *j, (&bar, &ws.values[*i]), n);
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
    ws.g = g;
    let scale = (-(s as f64)).exp2() as f32;
    if ws.live[0] {
        transpose(&ws.bars[0], abar, n);
        abar.iter_mut().for_each(|x| *x *= scale);
    } else {
        abar.fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copying pass (in strips of columns where n allows) gives the largest column sum of
    /// each column summed in row order, as a plain loop does, to the bit; it copies A; and it
    /// finds NaN and Inf anywhere.
    #[test]
    fn copying_norms_sum_each_column_in_row_order() {
        for n in [64, 48, 80, 5] {
            // Entries of mixed magnitudes, so that the order of the sums shows in their bits.
            let a: Vec<f32> = (0..n * n)
                .map(|k| ((k * 7919 % 1013) as f32 - 506.0) * 10f32.powi((k % 9) as i32 - 4))
                .collect();
            let expected = (0..n)
                .map(|j| (0..n).fold(0.0f64, |s, i| s + a[i * n + j].abs() as f64))
                .fold(0.0f64, f64::max);
            let mut copy = vec![0.0; n * n];
            let norm = column_norms_copying(&a, n, &mut copy);
            assert_eq!(norm.map(f64::to_bits), Some(expected.to_bits()), "n = {n}");
            assert_eq!(copy, a, "n = {n}");
            assert_eq!(
                column_norms(&a, n, 0.0).map(|(x, _)| x.to_bits()),
                Some(expected.to_bits())
            );
            for bad in [f32::NAN, f32::INFINITY] {
                let mut b = a.clone();
                b[n * n - 2] = bad;
                assert_eq!(
                    column_norms_copying(&b, n, &mut copy),
                    None,
                    "n = {n}, {bad}"
                );
            }
        }
    }
}
